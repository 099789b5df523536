"""``POST /v1/knowledge-bases/{name}/ask``: a grounded, cited answer from the knowledge base and an LLM
(:class:`~fastrag.querying.QueryEngine` over :meth:`~fastrag.knowledge_base.KnowledgeBase.search_result`).

Only the knowledge bases configured with an ``llm`` table get the route::

    [knowledge_bases.docs.llm]
    base_url = "http://localhost:8080/v1"   # an OpenAI-compatible chat completions endpoint
    model = "my-model"
    api_key_env = "LLM_API_KEY"             # optional: the key, from this environment variable

A failed retrieval is a 503 (the LLM is not called); an LLM that fails is a 503 naming its endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Request

from fastrag.errors import (
    BackendError,
    ConfigurationError,
    FilterError,
    InvalidParameterError,
)
from fastrag.serve.config import ServeLimits, TokenBinding
from fastrag.serve.errors import ServeError
from fastrag.serve.schemas import AskRequest, AskResponse, Citation

__all__ = ["answer_route", "llm_from_config"]


def llm_from_config(name: str, table: Any) -> Any:
    """An :class:`~fastrag.llm.OpenAICompatibleLLM` from a knowledge base's ``llm`` table.

    Raises:
        ConfigurationError: not a table, an unknown key, no ``base_url``/``model``, or an unset
            ``api_key_env`` variable.
    """
    from fastrag.llm import OpenAICompatibleLLM

    where = f"knowledge_bases.{name}.llm"
    if not isinstance(table, Mapping):
        raise ConfigurationError(f"{where} must be a table")
    unknown = sorted(set(table) - {"base_url", "model", "api_key_env", "timeout"})
    if unknown:
        raise ConfigurationError(f"{where}: unknown key(s) {unknown}")
    api_key = None
    if "api_key_env" in table:
        api_key = os.environ.get(str(table["api_key_env"]))
        if not api_key:
            raise ConfigurationError(f"{where}: environment variable {table['api_key_env']} is not set")
    options = {"timeout": float(table["timeout"])} if "timeout" in table else {}
    return OpenAICompatibleLLM(base_url=table.get("base_url", ""), model=table.get("model", ""), api_key=api_key,
                               **options)  # fmt: skip


class _NoRetrieval:
    """The engine's retriever slot: :func:`answer_route` retrieves itself (with the caller's scope) and
    hands the result to :meth:`QueryEngine.answer`, so this is never called."""

    async def retrieve(self, query: str, *, k: int = 10, filter: Any = None) -> list[Any]:
        raise AssertionError("not used")  # pragma: no cover


def answer_route(
    app: FastAPI, *, llms: Mapping[str, Any], limits: ServeLimits, caller: Callable[..., Any],
    open_kb: Callable[..., Any], tenant: Callable[..., Any], sdk_error: Callable[..., Any], chunk: Callable[..., Any],
    store_of: Callable[..., Any], timed_out: Callable[..., Any],
) -> None:  # fmt: skip
    """Add the ``/ask`` route to ``app`` (the helpers are the app's own: auth, tenancy, error mapping)."""
    from fastrag.querying import QueryEngine
    from fastrag.retrieval.result import RetrievalResult

    @app.post("/v1/knowledge-bases/{name}/ask", response_model=AskResponse, tags=["retrieval"],
              summary="answer a question from the knowledge base with the configured LLM, citing sources")  # fmt: skip
    async def ask(name: str, body: AskRequest, request: Request,
                  binding: TokenBinding | None = Depends(caller)) -> AskResponse:  # fmt: skip
        kb = open_kb(name, request, binding)
        llm = llms.get(name)
        if llm is None:
            raise ServeError(404, "not_found", f"knowledge base {name!r} has no LLM configured: no ask")
        if len(body.question) > limits.max_query_chars:
            raise ServeError(422, "invalid_request", f"question: longer than {limits.max_query_chars} characters",
                             detail=[{"loc": ["body", "question"], "msg": "too long", "type": "value_error"}])  # fmt: skip
        if body.top_k is not None and body.top_k > limits.max_top_k:
            raise ServeError(422, "invalid_request", f"top_k: must be at most {limits.max_top_k}",
                             detail=[{"loc": ["body", "top_k"], "msg": "too large", "type": "value_error"}])  # fmt: skip
        scope = tenant(body, binding)
        settings = {"top_k": body.top_k} if body.top_k is not None else {}
        try:
            with anyio.fail_after(limits.request_timeout):
                found = await kb.search_result(body.question, filter=body.filter, **scope, **settings)
        except (InvalidParameterError, FilterError, ConfigurationError) as exc:
            raise sdk_error(exc) from exc
        except TimeoutError as exc:
            raise timed_out(kb) from exc
        if found.retrieval_failed:
            raise ServeError(503, "retrieval_failed", f"retrieval failed: {found.error}", retrieval_failed=True,
                             store=store_of(kb, found.error))  # fmt: skip
        retrieval = RetrievalResult(documents=found.documents, failed_branches=found.failed_branches,
                                    partial=found.partial, timings=found.timings)  # fmt: skip
        engine = QueryEngine(retriever=_NoRetrieval(), llm=llm, k=found.settings.top_k)  # type: ignore[arg-type]
        try:
            answer = await engine.answer(body.question, retrieval)
        except BackendError as exc:
            raise ServeError(503, "llm_failed", f"the LLM failed: {exc}", store=getattr(llm, "url", None)) from exc
        return AskResponse(
            knowledge_base=name,
            answer=answer.text,
            status=answer.status,
            grounded=answer.grounded,
            partial=answer.partial,
            citations=[
                Citation(number=c.number, chunk_id=c.document.id, source=c.document.source_uri)
                for c in answer.citations
            ],
            sources=[chunk(doc) for doc in answer.sources],
        )
