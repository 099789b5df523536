"""The ASGI application of ``fastrag serve``: knowledge bases behind HTTP (FastAPI on Starlette).

::

    app = create_app({"docs": KnowledgeBase("sqlite:///kb.db")})     # or app_from_config(load_config(path))
    # uvicorn.run(app)  /  httpx.AsyncClient(transport=httpx.ASGITransport(app))

Routes (all JSON; the OpenAPI schema is at ``/openapi.json``, its rendering at ``/docs``):

* ``POST /v1/knowledge-bases/{name}/retrieve``: :class:`~fastrag.serve.schemas.RetrieveRequest` ->
  :class:`~fastrag.serve.schemas.RetrieveResponse` (``KnowledgeBase.search_result``);
* ``POST /v1/knowledge-bases/{name}/documents``: add; ``DELETE`` the same path: delete by ids and/or filter;
* ``POST /v1/knowledge-bases/{name}/ask``: when the knowledge base has an ``llm`` (else 404);
* ``POST /v1/retrieve``: the Retrieve API of the original design, knowledge base named in the body
  (:mod:`fastrag.serve.retrieve_api`: its own body, error shape and defaults, the same search);
* ``GET /healthz`` (the process answers), ``GET /readyz`` (every store answers a count; 503 naming those that
  do not), ``GET /metrics`` (Prometheus text format).

Status codes: 200; 401 (no or unknown bearer token, when tokens are configured); 403 (the token may not reach
this knowledge base, or names another tenant); 404 (no such knowledge base); 413 (body over
``max_body_bytes``); 422 (bad input: ``detail`` names each field as ``loc``); 503 (retrieval failed: the
store or model is down; ``retrieval_failed`` is true and ``store`` names it: never an empty 200).

Every request is logged once on the ``fastrag.serve.access`` logger (INFO) as one JSON object: method, path,
status, seconds, the knowledge base, the token's label and the per-stage timings of the retrieval.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from fastrag.errors import BackendError, ConfigurationError, EmbeddingError, FilterError, InvalidParameterError
from fastrag.knowledge_base import KnowledgeBase, SearchResponse
from fastrag.models import PARENT_ID, RANK, SCORE, Document
from fastrag.serve.config import ServeConfig, ServeLimits, TokenBinding
from fastrag.serve.errors import ServeError, failure, field_of, invalid, store_of
from fastrag.serve.schemas import (
    AddDocumentsRequest,
    AddDocumentsResponse,
    DeleteDocumentsRequest,
    DeleteDocumentsResponse,
    ErrorResponse,
    RetrievedChunk,
    RetrieveRequest,
    RetrieveResponse,
)

__all__ = ["app_from_config", "create_app"]

access_log = logging.getLogger("fastrag.serve.access")
logger = logging.getLogger("fastrag.serve")

READY_TIMEOUT = 5.0
"""Seconds ``/readyz`` waits for each store's count before calling it unreachable."""

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (401, "no or unknown bearer token"),
        (403, "the token may not reach this knowledge base or tenant"),
        (404, "no such knowledge base"),
        (413, "request body too large"),
        (422, "invalid input: detail names each field"),
        (503, "retrieval failed: the store (or a model) is down; store names it"),
    )
}


def _chunk(doc: Document) -> RetrievedChunk:
    parent = doc.metadata.get(PARENT_ID)
    return RetrievedChunk(
        document_id=parent if isinstance(parent, str) and parent else doc.id,
        chunk_id=doc.id,
        source=doc.source_uri,
        score=doc.score,
        rank=doc.rank if doc.rank is not None else 0,
        content=doc.content,
        metadata={k: v for k, v in doc.metadata.items() if k not in (SCORE, RANK)},
    )


def _setting(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value if value is None or isinstance(value, str | int | float | bool) else repr(value)


class _Limits:
    """Body size limit, access log and metrics, as one pure-ASGI middleware (no buffering of responses)."""

    def __init__(self, app: Any, *, max_body_bytes: int, metrics: Any) -> None:
        self.app, self.max_body_bytes, self.metrics = app, max_body_bytes, metrics

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        info: dict[str, Any] = {"timings": {}}
        scope["fastrag"] = info
        status = {"code": 500, "sent": False, "cut": False}
        length = dict(scope.get("headers") or {}).get(b"content-length")
        received = 0
        too_large = {"error": "body_too_large", "message": f"the request body is over {self.max_body_bytes} bytes"}

        async def counting_receive() -> Any:
            nonlocal received
            if status["cut"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes and not status["sent"]:
                    # answer 413 now; the app sees a disconnected client and whatever it sends is dropped
                    await JSONResponse(too_large, status_code=413)(scope, receive, tracking_send)
                    status["cut"] = True
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message: dict[str, Any]) -> None:
            if status["cut"]:
                return
            if message["type"] == "http.response.start":
                status["code"], status["sent"] = message["status"], True
            await send(message)

        try:
            if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
                await JSONResponse(too_large, status_code=413)(scope, receive, tracking_send)
            else:
                await self.app(scope, counting_receive, tracking_send)
        except Exception:
            if not status["cut"]:
                raise
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            path_template = getattr(route, "path", "unmatched")
            record = {"method": scope["method"], "path": scope["path"], "status": status["code"],
                      "seconds": round(elapsed, 6), **{k: v for k, v in info.items() if v}}  # fmt: skip
            access_log.info(json.dumps(record, default=str))
            if self.metrics is not None:
                self.metrics.observe(scope["method"], path_template, status["code"], elapsed)


class _Metrics:
    """Prometheus counters and histograms in the app's own registry (prometheus-client)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("fastrag_http_requests", "HTTP requests", ["method", "route", "status"],
                                registry=self.registry)  # fmt: skip
        self.seconds = Histogram("fastrag_http_request_seconds", "HTTP request duration in seconds",
                                 ["method", "route"], registry=self.registry)  # fmt: skip

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.seconds.labels(method, route).observe(seconds)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def create_app(
    knowledge_bases: Mapping[str, KnowledgeBase],
    *,
    limits: ServeLimits | None = None,
    tokens: tuple[TokenBinding, ...] = (),
    llms: Mapping[str, Any] | None = None,
    subspaces: Collection[str] = (),
) -> FastAPI:
    """The ASGI app serving ``knowledge_bases`` by name.

    The app's lifespan opens every knowledge base at startup (a store that cannot be opened stops the
    startup: its error, such as :class:`~fastrag.errors.BackendUnavailableError`, is logged naming the
    knowledge base and raised) and closes them at shutdown; so the app owns them: pass knowledge bases that
    nothing else closes.

    Args:
        knowledge_bases: ``{name: KnowledgeBase}``, at least one.
        limits: request limits (default :class:`~fastrag.serve.config.ServeLimits`).
        tokens: bearer tokens; empty: no authentication.
        llms: ``{name: LLM}`` for the knowledge bases that answer ``/ask`` (an object with ``chat``, such as
            :class:`~fastrag.llm.OpenAICompatibleLLM`; opened and closed with the app when it is an async
            context manager).
        subspaces: the knowledge bases whose ``POST /v1/retrieve`` calls must name their subspaces (each
            declares ``subspace`` as a string field; :mod:`fastrag.serve.retrieve_api`).

    Raises:
        ConfigurationError: no knowledge base, an ``llms`` or ``subspaces`` name that is not a knowledge
            base, or a knowledge base in ``subspaces`` that does not declare the ``subspace`` field.
    """
    if not knowledge_bases:
        raise ConfigurationError("create_app needs at least one knowledge base")
    kbs = dict(knowledge_bases)
    llms = dict(llms or {})
    if set(llms) - set(kbs):
        raise ConfigurationError(f"llms for unknown knowledge base(s) {sorted(set(llms) - set(kbs))}")
    limits = limits or ServeLimits()
    from fastrag.serve.retrieve_api import check_subspaces, retrieve_api_route

    with_subspaces = check_subspaces(kbs, subspaces)
    try:
        metrics: _Metrics | None = _Metrics()
    except ImportError:  # pragma: no cover - prometheus-client is in the serve extra
        metrics = None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for name, kb in kbs.items():
                try:
                    await stack.enter_async_context(kb)
                except Exception as exc:
                    logger.error("knowledge base %r could not be opened: %s: %s", name, type(exc).__name__, exc)
                    raise
                logger.info("knowledge base %r open: %r", name, kb)
            for llm in llms.values():
                if isinstance(llm, AbstractAsyncContextManager):
                    await stack.enter_async_context(llm)
            yield

    app = FastAPI(title="fastrag", summary="fastrag knowledge bases over HTTP", lifespan=lifespan,
                  responses=_ERRORS)  # fmt: skip
    app.add_middleware(_Limits, max_body_bytes=limits.max_body_bytes, metrics=metrics)
    bearer = HTTPBearer(auto_error=False, description="a token from [serve.tokens] (when any is configured)")

    @app.exception_handler(ServeError)
    async def _serve_error(_: Request, exc: ServeError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(exc.body, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]  # fmt: skip
        first = detail[0] if detail else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"][1:]) or "body"
        body = {"error": "invalid_request", "message": f"{where}: {first['msg']}", "detail": detail}
        return JSONResponse(body, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse({"error": code, "message": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))  # fmt: skip

    # ------------------------------------------------------------------------------ auth, tenancy

    def caller(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> TokenBinding | None:  # noqa: B008
        if not tokens:
            return None
        if credentials is None:
            raise ServeError(401, "unauthorized", "this service needs Authorization: Bearer <token>")
        for binding in tokens:
            if binding.matches(credentials.credentials):
                return binding
        raise ServeError(401, "unauthorized", "unknown bearer token")

    def open_kb(name: str, request: Request, binding: TokenBinding | None) -> KnowledgeBase:
        request.scope["fastrag"]["knowledge_base"] = name
        kb = kbs.get(name)
        if binding is not None:
            request.scope["fastrag"]["token"] = binding.label
            if binding.knowledge_bases is not None and name not in binding.knowledge_bases:
                raise ServeError(403, "forbidden", f"this token may not reach knowledge base {name!r}")
        if kb is None:
            raise ServeError(404, "not_found", f"no knowledge base {name!r}; served: {sorted(kbs)}")
        return kb

    def tenant(body: Any, binding: TokenBinding | None) -> dict[str, Any]:
        """The call's scope: the request's user_id/agent_id, which must agree with the token's binding."""
        scope = {key: getattr(body, key) for key in ("user_id", "agent_id") if getattr(body, key) is not None}
        if binding is None:
            return scope
        for key, bound in binding.scope.items():
            asked = scope.get(key)
            if asked is not None and (type(asked) is not type(bound) or asked != bound):
                raise ServeError(403, "forbidden", f"this token is bound to another {key}; it may not name {key}={asked!r}")
            scope[key] = bound
        return scope

    def timed_out(kb: KnowledgeBase) -> ServeError:
        message = f"retrieval took longer than the service's request_timeout ({limits.request_timeout:g} s)"
        return ServeError(503, "retrieval_failed", message, retrieval_failed=True, store=store_of(kb, None))

    def sdk_error(exc: Exception) -> ServeError:
        if isinstance(exc, FilterError):
            return ServeError(422, "invalid_request", f"filter: {exc}",
                              detail=[{"loc": ["body", "filter"], "msg": str(exc), "type": "filter_error",
                                       "path": exc.path}])  # fmt: skip
        return invalid(field_of(str(exc)), str(exc))

    # ---------------------------------------------------------------------------------- routes

    @app.get("/healthz", tags=["health"], summary="the process answers")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="every store answers", responses={503: {"model": ErrorResponse}})
    async def readyz() -> JSONResponse:
        states: dict[str, str] = {}
        for name, kb in kbs.items():
            try:
                with anyio.fail_after(READY_TIMEOUT):
                    await kb.store.count()
                    if kb.lexical_store is not None and kb.lexical_store is not kb.store:
                        await kb.lexical_store.count()
                states[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - any failure means not ready, reported by name
                states[name] = f"{type(exc).__name__}: {exc}" if not isinstance(exc, TimeoutError) else (
                    f"no answer within {READY_TIMEOUT:g} s")  # fmt: skip
        failed = {k: v for k, v in states.items() if v != "ok"}
        if failed:
            stores = ", ".join(f"{k} ({store_of(kbs[k], None)})" for k in failed)
            return JSONResponse({"error": "not_ready", "message": f"store(s) not reachable: {stores}",
                                 "knowledge_bases": states}, status_code=503)  # fmt: skip
        return JSONResponse({"status": "ready", "knowledge_bases": states})

    if metrics is not None:

        @app.get("/metrics", tags=["health"], summary="Prometheus metrics", response_class=PlainTextResponse)
        async def prometheus() -> PlainTextResponse:
            return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/knowledge-bases/{name}/retrieve", response_model=RetrieveResponse, tags=["retrieval"],
              summary="retrieve the best chunks for a query")  # fmt: skip
    async def retrieve(name: str, body: RetrieveRequest, request: Request,
                       binding: TokenBinding | None = Depends(caller)) -> RetrieveResponse:  # fmt: skip
        kb = open_kb(name, request, binding)
        if len(body.query) > limits.max_query_chars:
            raise invalid("query", f"is {len(body.query)} characters long; the limit is {limits.max_query_chars}")
        if body.top_k is not None and body.top_k > limits.max_top_k:
            raise invalid("top_k", f"must be at most {limits.max_top_k}, got {body.top_k}")
        settings = body.settings()
        scope = tenant(body, binding)
        try:
            with anyio.fail_after(limits.request_timeout):
                response: SearchResponse = await kb.search_result(
                    body.query, filter=body.filter, offset=body.offset, **scope, **settings
                )
        except (InvalidParameterError, FilterError, ConfigurationError) as exc:
            raise sdk_error(exc) from exc
        except TimeoutError as exc:
            raise timed_out(kb) from exc
        request.scope["fastrag"]["timings"] = dict(response.timings)
        request.scope["fastrag"]["strategy"] = response.strategy
        failed = {branch: failure(kb, err) for branch, err in response.failed_branches.items()}
        if response.retrieval_failed:
            assert response.error is not None
            store = store_of(kb, response.error)
            raise ServeError(503, "retrieval_failed", f"retrieval failed: {type(response.error).__name__}: "
                             f"{response.error}", retrieval_failed=True, store=store, failed_branches=failed)  # fmt: skip
        resolved = response.settings
        return RetrieveResponse(
            knowledge_base=name,
            results=[_chunk(doc) for doc in response.documents],
            strategy=response.strategy,
            settings={k: {"value": _setting(getattr(resolved, k)), "origin": o} for k, o in resolved.origins.items()},
            corpus_size=response.corpus_size,
            partial=response.partial,
            failed_branches=failed,
            timings=dict(response.timings),
            complete=response.complete,
            incomplete=dict(response.incomplete),
            skipped_branches=dict(response.skipped_branches),
            zero_vector_branches=list(response.zero_vector_branches),
        )

    @app.post("/v1/knowledge-bases/{name}/documents", response_model=AddDocumentsResponse, tags=["documents"],
              summary="add (or replace, by id) documents")  # fmt: skip
    async def add_documents(name: str, body: AddDocumentsRequest, request: Request,
                            binding: TokenBinding | None = Depends(caller)) -> AddDocumentsResponse:  # fmt: skip
        kb = open_kb(name, request, binding)
        if len(body.documents) > limits.max_documents:
            raise invalid("documents", f"at most {limits.max_documents} documents per request, got {len(body.documents)}")
        scope = tenant(body, binding)
        try:
            docs = [Document(id=d.id, content=d.content, metadata=d.metadata) for d in body.documents]
            added = await kb.add_documents(docs, **scope)
        except (InvalidParameterError, FilterError, ConfigurationError) as exc:
            raise sdk_error(exc) from exc
        except (BackendError, EmbeddingError) as exc:  # the store or the embedder failed (a bug stays a 500)
            raise ServeError(503, "write_failed", f"{type(exc).__name__}: {exc}", store=store_of(kb, exc)) from exc
        return AddDocumentsResponse(added=added)

    @app.delete("/v1/knowledge-bases/{name}/documents", response_model=DeleteDocumentsResponse,
                tags=["documents"], summary="delete documents by ids and/or filter")  # fmt: skip
    async def delete_documents(name: str, body: DeleteDocumentsRequest, request: Request,
                               binding: TokenBinding | None = Depends(caller)) -> DeleteDocumentsResponse:  # fmt: skip
        kb = open_kb(name, request, binding)
        if body.ids is None and body.filter is None:
            raise invalid(None, "give ids, a filter, or both")
        scope = tenant(body, binding)
        try:
            deleted = await kb.delete(ids=body.ids, filter=body.filter, **scope)
        except (InvalidParameterError, FilterError, ConfigurationError) as exc:
            raise sdk_error(exc) from exc
        except BackendError as exc:
            raise ServeError(503, "write_failed", f"{type(exc).__name__}: {exc}", store=store_of(kb, exc)) from exc
        return DeleteDocumentsResponse(deleted=deleted)

    generate = app.openapi

    def openapi() -> dict[str, Any]:
        """FastAPI's schema, with ``{name}`` an enum of the served knowledge bases."""
        if app.openapi_schema is None:
            schema = generate()
            for item in schema.get("paths", {}).values():
                for operation in item.values():
                    for parameter in operation.get("parameters", []):
                        if parameter.get("in") == "path" and parameter.get("name") == "name":
                            parameter["schema"] = {"type": "string", "enum": sorted(kbs), "title": "Name"}
                            parameter["description"] = "the knowledge base (one of those this service serves)"
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]

    retrieve_api_route(app, limits=limits, subspaces=with_subspaces, caller=caller, open_kb=open_kb,
                       timed_out=timed_out, store_of=store_of)  # fmt: skip
    if llms:
        from fastrag.serve.ask import answer_route

        answer_route(app, llms=llms, timed_out=timed_out, limits=limits, caller=caller, open_kb=open_kb, tenant=tenant,
                     sdk_error=sdk_error, chunk=_chunk, store_of=store_of)  # fmt: skip
    return app


def app_from_config(config: ServeConfig) -> FastAPI:
    """:func:`create_app` over the knowledge bases a :class:`~fastrag.serve.config.ServeConfig` describes
    (each table through :meth:`~fastrag.knowledge_base.KnowledgeBase.from_config`; an ``llm`` sub-table
    ``{base_url, model, api_key_env}`` makes that knowledge base answer ``/ask``; ``subspaces = true`` makes
    every ``POST /v1/retrieve`` on it name its subspaces).

    Raises:
        ConfigurationError: a table :meth:`KnowledgeBase.from_config` refuses (named), or a bad ``llm``.
    """
    kbs: dict[str, KnowledgeBase] = {}
    llms: dict[str, Any] = {}
    subspaces: list[str] = []
    for name, table in config.knowledge_bases.items():
        table = dict(table)
        llm = table.pop("llm", None)
        enabled = table.pop("subspaces", False)
        if not isinstance(enabled, bool):
            raise ConfigurationError(f"knowledge_bases.{name}.subspaces must be true or false, got {enabled!r}")
        if enabled:
            subspaces.append(name)
        try:
            kbs[name] = KnowledgeBase.from_config(table)
        except ConfigurationError as exc:
            raise ConfigurationError(f"knowledge_bases.{name}: {exc}") from exc
        if llm is not None:
            from fastrag.serve.ask import llm_from_config

            llms[name] = llm_from_config(name, llm)
    return create_app(kbs, limits=config.limits, tokens=config.tokens, llms=llms, subspaces=subspaces)
