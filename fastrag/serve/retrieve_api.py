"""``POST /v1/retrieve``: the Retrieve API of the original design, as a route of ``fastrag serve``.

The body names its knowledge base (``knowledgeBaseName``) instead of the path, and speaks the design's
vocabulary; the route maps it onto fastrag's :class:`~fastrag.settings.SearchSettings` names and calls
:meth:`~fastrag.knowledge_base.KnowledgeBase.search_result`, like every other entrance: it composes no
retriever of its own. ``docs/retrieve-api.md`` documents the body, the mapping, the answer and the two
example requests (reconstructed from issue 27's description of the design).

=============================================================  ===================================================
Retrieve API                                                   fastrag
=============================================================  ===================================================
``retrievalQuery.text``                                        the query (``retrieve_api_max_text_chars``, 128)
``searchType`` ``[DENSE_VECTOR]`` / ``[FULL_TEXT]`` / both     ``mode`` ``vector`` / ``keyword`` / ``hybrid``
``denseVectorSearchConfiguration.numberOfResults`` (<= 100)    ``vector_candidate_k`` (hybrid; see below)
``fullTextSearchConfiguration.numberOfResults`` (<= 100)       ``keyword_candidate_k`` (hybrid; see below)
``rerankingConfiguration.numberOfResults``                     ``top_k``
``type: WEIGHT`` + ``weightConfiguration``                     ``fusion="weighted"``, ``vector_weight``,
                                                               ``keyword_weight`` (normalisation: min-max)
``type: RRF`` + ``rrfConfiguration`` (weights, ``k``)          ``fusion="rrf"``, the weights, ``rank_constant``
``type: MODEL`` + ``modelConfiguration``                       ``rerank=True`` with the knowledge base's reranker
``filter``                                                     the filter (fastrag's JSON form: the same operators)
``subspace``                                                   ``in`` filter on the declared field ``subspace``
=============================================================  ===================================================

In a single-branch search (``searchType`` one value) the branch's ``numberOfResults`` is what that branch
hands on: the reranker's candidates (``candidate_k``) with ``MODEL``, else the result list itself (``top_k``,
at most ``rerankingConfiguration.numberOfResults`` when that is given too).

Precedence, field by field: the request, then the knowledge base's settings, then this route's defaults
(:data:`RETRIEVE_API_DEFAULTS`: hybrid, weighted fusion of min-max normalised scores with dense 0.7 and
full text 0.3, 20 results), then fastrag's own (:data:`~fastrag.settings.SYSTEM_DEFAULTS` and the
embedder's measured row). There is one resolver, :func:`~fastrag.settings.resolve_settings`: the route
passes a default of its table in the request only for a field that neither the request nor the knowledge
base sets.

Errors are ``{"code": "VALIDATION_ERROR", "message": ...}`` (HTTP 400) for a body the route refuses, and
``{"code", "message"}`` with ``UNAUTHORIZED`` (401), ``FORBIDDEN`` (403), ``NOT_FOUND`` (404) and
``RETRIEVAL_FAILED`` (503) otherwise; a body over ``max_body_bytes`` is answered by the service's size limit
before any route (413, ``{"error": "body_too_large"}``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, StrictStr
from pydantic.alias_generators import to_camel

from fastrag.errors import ConfigurationError, FilterError, InvalidParameterError
from fastrag.filters import And, parse_filter
from fastrag.knowledge_base import KnowledgeBase, SearchResponse
from fastrag.models import PARENT_ID, RANK, SCORE, Document
from fastrag.retrieval.limits import MAX_K, MAX_QUERY_CHARS
from fastrag.serve.config import ServeLimits, TokenBinding
from fastrag.serve.errors import ServeError
from fastrag.serve.schemas import Count, StrictBody
from fastrag.settings import DEFAULT_RERANK_MODEL, MAX_RANK_CONSTANT, MAX_WEIGHT

__all__ = [
    "MAX_BRANCH_RESULTS",
    "MAX_SUBSPACES",
    "RETRIEVE_API_DEFAULTS",
    "SUBSPACE_FIELD",
    "RetrieveApiRequest",
    "RetrieveApiResponse",
    "check_subspaces",
    "retrieve_api_route",
    "search_request",
]

SUBSPACE_FIELD = "subspace"
"""The metadata field a subspace is: a knowledge base that enables subspaces declares it as a string field,
each document carries its subspace there, and a request's ``subspace`` list is an ``in`` filter on it."""
MAX_SUBSPACES = 32
"""The most subspaces one request may name (the design's limit)."""
MAX_BRANCH_RESULTS = 100
"""The largest ``numberOfResults`` of one search branch (the design's limit)."""

RETRIEVE_API_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "mode": "hybrid",
    "fusion": "weighted",
    "normalization": "min_max",
    "vector_weight": 0.7,
    "keyword_weight": 0.3,
    "top_k": 20,
})  # fmt: skip
"""This route's system defaults, in :data:`~fastrag.settings.OPTIONS` names: the design's (hybrid search,
``WEIGHT`` reranking with dense 0.7 and full text 0.3, 20 results). The design's ``WEIGHT`` adds weighted
scores of two searches whose scales differ (cosine, unbounded BM25), which only means something once both
are on one scale; min-max to [0, 1] is the normalisation a weighted sum of that kind conventionally uses
(and fastrag's measured default for its shipped model), so ``WEIGHT`` is min-max unless the knowledge base
sets ``normalization``. Unmeasured here: these are the design's numbers, not fastrag's measured ones
(``docs/planning.md``), which a knowledge base keeps by setting the fields itself."""

_SEARCH_TYPES = {
    frozenset({"DENSE_VECTOR"}): "vector",
    frozenset({"FULL_TEXT"}): "keyword",
    frozenset({"DENSE_VECTOR", "FULL_TEXT"}): "hybrid",
}
_CODES = {400: "VALIDATION_ERROR", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND", 503: "RETRIEVAL_FAILED"}
_COHERE_DEFAULT_MODEL = "rerank-v3.5"  # CohereReranker's default model, which rerank_model "cohere" opens


# --------------------------------------------------------------------------------------------- bodies


class _Camel(StrictBody):
    """A request object of the design: camelCase names only, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=False, protected_namespaces=())


Subspace = Annotated[StrictStr, Field(min_length=1, max_length=256)]
"""One subspace's name: a non-empty string."""


class RetrievalQuery(_Camel):
    type: Literal["TEXT"] = Field(description="the query's kind: TEXT")
    text: StrictStr = Field(min_length=1, max_length=MAX_QUERY_CHARS,
                            description="the question (at most retrieve_api_max_text_chars, 128 by default)")


class BranchConfiguration(_Camel):
    number_of_results: Count | None = Field(None, ge=1, le=MAX_BRANCH_RESULTS,
                                            description="how many results this search hands on (1 to 100)")


class WeightConfiguration(_Camel):
    dense_vector_search_weight: float | None = Field(None, ge=0, le=MAX_WEIGHT)
    full_text_search_weight: float | None = Field(None, ge=0, le=MAX_WEIGHT)


class RrfConfiguration(WeightConfiguration):
    k: float | None = Field(None, gt=0, le=MAX_RANK_CONSTANT, description="RRF's rank constant (Cormack et al. 2009: 60)")


class ModelConfiguration(_Camel):
    provider: StrictStr | None = Field(None, min_length=1, max_length=256,
                                       description="the configured reranker's provider: embedder, cohere, cross-encoder")
    model: StrictStr | None = Field(None, min_length=1, max_length=1024, description="the configured reranker's model")


class RerankingConfiguration(_Camel):
    type: Literal["WEIGHT", "RRF", "MODEL"] | None = None
    number_of_results: Count | None = Field(None, ge=1, le=MAX_K, description="how many results (top_k)")
    weight_configuration: WeightConfiguration | None = None
    rrf_configuration: RrfConfiguration | None = None
    model_configuration: ModelConfiguration | None = None


class RetrievalConfiguration(_Camel):
    search_type: list[Literal["DENSE_VECTOR", "FULL_TEXT"]] | None = Field(None, min_length=1, max_length=2)
    dense_vector_search_configuration: BranchConfiguration | None = None
    full_text_search_configuration: BranchConfiguration | None = None
    reranking_configuration: RerankingConfiguration | None = None


class RetrieveApiRequest(_Camel):
    """``POST /v1/retrieve``. Every setting left out comes from the knowledge base, then from this route's
    defaults (:data:`RETRIEVE_API_DEFAULTS`)."""

    knowledge_base_name: StrictStr = Field(min_length=1, max_length=64, description="the knowledge base")
    subspace: list[Subspace] | None = Field(
        None, min_length=1, max_length=MAX_SUBSPACES,
        description="search these subspaces (required when the knowledge base enables subspaces)")
    retrieval_query: RetrievalQuery
    retrieval_configuration: RetrievalConfiguration | None = None
    filter: dict[str, Any] | None = Field(None, description="equals, notEquals, greaterThan, ..., in, notIn, "
                                          "startsWith, stringContains, listContains, andAll, orAll, notAll")


class RetrievalResultItem(BaseModel):
    """One result."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    doc_id: str = Field(description="the source document: the chunk's parent_id, else the chunk's id")
    chunk_id: str = Field(description="the chunk's id (as written, in the caller's tenant)")
    oss_key: str | None = Field(description="where the document is stored: its source_uri")
    score: float = Field(description="higher is better, in the last stage's range (docs/serve.md)")
    content: str
    subspace: Any = Field(description="the chunk's subspace (metadata subspace), or null")
    metadata: dict[str, Any]


class RetrievalData(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    retrieval_results: list[RetrievalResultItem] = Field(description="best first: score descending")


class RetrieveApiResponse(BaseModel):
    """``{code, data: {retrievalResults}, message}``: ``code`` is ``SUCCESS``, or ``PARTIAL_SUCCESS`` when
    results may be missing (a failed branch with ``on_branch_error = "partial"``; ``message`` says what)."""

    code: Literal["SUCCESS", "PARTIAL_SUCCESS"]
    data: RetrievalData
    message: str


class RetrieveApiError(BaseModel):
    """An error: ``VALIDATION_ERROR`` (400), ``UNAUTHORIZED``, ``FORBIDDEN``, ``NOT_FOUND``, ``RETRIEVAL_FAILED``."""

    code: str
    message: str


# --------------------------------------------------------------------------------------------- mapping


def _invalid(where: str, message: str) -> ServeError:
    return ServeError(400, "VALIDATION_ERROR", f"{where}: {message}")


def check_subspaces(knowledge_bases: Mapping[str, KnowledgeBase], subspaces: Collection[str]) -> frozenset[str]:
    """The names of the knowledge bases that enable subspaces, checked.

    Raises:
        ConfigurationError: a name that is not a served knowledge base, or a knowledge base that does not
            declare ``subspace`` as a string field (``fields = {subspace = "string"}``).
    """
    names = frozenset(subspaces)
    unknown = sorted(names - set(knowledge_bases))
    if unknown:
        raise ConfigurationError(f"subspaces enabled for unknown knowledge base(s) {unknown}")
    for name in sorted(names):
        fields = knowledge_bases[name].fields
        if fields is None or fields.get(SUBSPACE_FIELD) != "string":
            raise ConfigurationError(
                f"knowledge base {name!r} enables subspaces: declare the field they live in, "
                f'fields = {{{SUBSPACE_FIELD} = "string", ...}}'
            )
    return names


def _reranker_of(kb: KnowledgeBase) -> tuple[str, str | None]:
    """``(provider, model)`` of the reranker a ``MODEL`` request on ``kb`` gets (its ``rerank_model``, else
    :data:`~fastrag.settings.DEFAULT_RERANK_MODEL`); a folder is named by its last component only."""
    spec = kb.settings.rerank_model if kb.settings.rerank_model is not None else DEFAULT_RERANK_MODEL
    if isinstance(spec, str):
        if spec == "embedder":
            embedder = kb.embedder
            return "embedder", getattr(embedder, "name", None) if embedder is not None else None
        if spec == "cohere" or spec.startswith("cohere:"):
            return "cohere", spec.partition(":")[2].strip() or _COHERE_DEFAULT_MODEL
        return "cross-encoder", Path(spec).name
    model = getattr(spec, "model", None) or getattr(spec, "model_path", None)
    provider = getattr(spec, "name", None)
    return (provider if isinstance(provider, str) else type(spec).__name__), (Path(str(model)).name if model else None)


def _check_model(config: ModelConfiguration | None, kb: KnowledgeBase, name: str) -> None:
    """A ``modelConfiguration`` must name the knowledge base's own reranker: a request that could choose a
    model could make the server load any model or file."""
    if config is None:
        return
    provider, model = _reranker_of(kb)
    asked_provider = config.provider.strip().lower() if config.provider is not None else None
    if (asked_provider is not None and asked_provider != provider) or (config.model is not None and config.model != model):
        raise _invalid(
            "retrievalConfiguration.rerankingConfiguration.modelConfiguration",
            f"knowledge base {name!r} reranks with provider {provider!r}, model {model!r}; a request can only use "
            "the configured reranker (naming another would let callers load models or files on the server)",
        )


def search_request(body: RetrieveApiRequest, kb: KnowledgeBase, *, max_top_k: int = MAX_K) -> dict[str, Any]:
    """The search settings (:data:`~fastrag.settings.OPTIONS` names) for ``kb.search_result``: what the
    body sets, then :data:`RETRIEVE_API_DEFAULTS` for each field neither the body nor ``kb.settings`` sets.

    Args:
        body: the request.
        kb: the knowledge base it names (its ``settings`` are the middle layer).
        max_top_k: the most results the body may ask for (the service's ``max_top_k``).

    Raises:
        ServeError: ``VALIDATION_ERROR`` (400): a fusion (``WEIGHT``, ``RRF``) or a branch's configuration
            for a search that runs one branch; a configuration of another ``type`` than the one given
            (``weightConfiguration`` with ``RRF``); a ``modelConfiguration`` that is not the knowledge base's
            reranker; more results asked for than ``max_top_k``.
    """
    name = body.knowledge_base_name
    config = body.retrieval_configuration or RetrievalConfiguration()
    own = kb.settings
    request: dict[str, Any] = {}
    if config.search_type is not None:
        kinds = frozenset(config.search_type)
        if len(kinds) != len(config.search_type):
            raise _invalid("retrievalConfiguration.searchType", f"names a search twice: {config.search_type}")
        request["mode"] = _SEARCH_TYPES[kinds]
    mode = request.get("mode") or own.mode or RETRIEVE_API_DEFAULTS["mode"]
    reranking = config.reranking_configuration or RerankingConfiguration()
    where = "retrievalConfiguration.rerankingConfiguration"
    for kind, sub in (("WEIGHT", "weight_configuration"), ("RRF", "rrf_configuration"), ("MODEL", "model_configuration")):
        if getattr(reranking, sub) is not None and reranking.type != kind:
            raise _invalid(f"{where}.{to_camel(sub)}", f"applies to type {kind}, and type is {reranking.type}")
    if reranking.type in ("WEIGHT", "RRF"):
        if mode in ("vector", "keyword"):
            raise _invalid(f"{where}.type", f"{reranking.type} fuses the dense and full-text searches; this search "
                                            f"runs one ({'DENSE_VECTOR' if mode == 'vector' else 'FULL_TEXT'})")  # fmt: skip
        weights = reranking.weight_configuration if reranking.type == "WEIGHT" else reranking.rrf_configuration
        request["rerank"] = False
        request["fusion"] = "weighted" if reranking.type == "WEIGHT" else "rrf"
        if weights is not None:
            for field, option in (("dense_vector_search_weight", "vector_weight"),
                                  ("full_text_search_weight", "keyword_weight")):  # fmt: skip
                if getattr(weights, field) is not None:
                    request[option] = getattr(weights, field)
        if reranking.rrf_configuration is not None and reranking.rrf_configuration.k is not None:
            request["rank_constant"] = reranking.rrf_configuration.k
    elif reranking.type == "MODEL":
        _check_model(reranking.model_configuration, kb, name)
        request["rerank"] = True
    reranks = request.get("rerank", bool(own.rerank))
    asked = "retrievalConfiguration"
    top_k = reranking.number_of_results
    if top_k is not None:
        request["top_k"] = top_k
        asked = f"{where}.numberOfResults"
    dense = (config.dense_vector_search_configuration or BranchConfiguration()).number_of_results
    full = (config.full_text_search_configuration or BranchConfiguration()).number_of_results
    if mode in ("vector", "keyword"):
        branches = ("denseVectorSearchConfiguration", "fullTextSearchConfiguration")
        (mine, theirs), (own_name, other) = ((dense, full), branches) if mode == "vector" else ((full, dense), branches[::-1])
        if theirs is not None:
            raise _invalid(f"retrievalConfiguration.{other}", f"this search runs one branch ({mode}), not that one")
        if mine is not None:
            if reranks:
                request["candidate_k"] = mine  # what the branch hands the reranker
            else:
                request["top_k"] = min(mine, top_k) if top_k is not None else mine  # the branch's list is the result
                if top_k is None or mine < top_k:
                    asked = f"retrievalConfiguration.{own_name}.numberOfResults"
    else:  # hybrid (and auto, which fuses the same two branches)
        if dense is not None:
            request["vector_candidate_k"] = dense
        if full is not None:
            request["keyword_candidate_k"] = full
    if request.get("top_k", 0) > max_top_k:
        raise _invalid(asked, f"asks for {request['top_k']} results; the service's max_top_k is {max_top_k}")
    defaulted = {option for option in RETRIEVE_API_DEFAULTS if option not in request and getattr(own, option) is None}
    request.update({option: RETRIEVE_API_DEFAULTS[option] for option in defaulted})
    candidates = request.get("candidate_k", own.candidate_k)
    if reranks and "top_k" in defaulted and candidates is not None and candidates < request["top_k"]:
        request["top_k"] = candidates  # a default top_k is lowered to the reranker's candidates, as resolve_settings does
    return request


def search_filter(body: RetrieveApiRequest, kb: KnowledgeBase, *, subspaces: bool) -> Any:
    """The search's filter: the body's ``filter`` AND-ed with ``subspace in [...]``.

    Raises:
        ServeError: ``VALIDATION_ERROR`` (400): a filter on a knowledge base that declares no fields, a
            malformed filter (its path named), a subspace missing where the knowledge base enables subspaces
            or given where it does not.
    """
    name = body.knowledge_base_name
    node = None
    if body.filter is not None:
        if kb.fields is None:
            raise _invalid("filter", f"knowledge base {name!r} declares no fields, and this API filters declared "
                                     "fields only: declare them (fields = {...}; fields = {} allows the built-in ones)")  # fmt: skip
        try:
            node = parse_filter(body.filter)
        except FilterError as exc:
            raise _invalid("filter", str(exc)) from exc
    if not subspaces:
        if body.subspace is not None:
            raise _invalid("subspace", f"knowledge base {name!r} does not enable subspaces")
        return node
    if body.subspace is None:
        raise _invalid("subspace", f"is required: knowledge base {name!r} enables subspaces (at most {MAX_SUBSPACES})")
    within = parse_filter({"in": {"key": SUBSPACE_FIELD, "value": list(body.subspace)}})
    return within if node is None else And((node, within))  # not flattened: the body's filter is andAll[0]


def _result(doc: Document) -> RetrievalResultItem:
    parent = doc.metadata.get(PARENT_ID)
    return RetrievalResultItem(
        doc_id=parent if isinstance(parent, str) and parent else doc.id,
        chunk_id=doc.id,
        oss_key=doc.source_uri,
        score=float(doc.score if doc.score is not None else 0.0),
        content=doc.content,
        subspace=doc.metadata.get(SUBSPACE_FIELD),
        metadata={k: v for k, v in doc.metadata.items() if k not in (SCORE, RANK)},
    )


def _missing(response: SearchResponse) -> str:
    parts = [f"the {branch} search failed: {type(err).__name__}: {err}" for branch, err in response.failed_branches.items()]
    parts += [f"the {branch} search was not run: {why}" for branch, why in response.skipped_branches.items()]
    parts += [f"{stage}: {why}" for stage, why in response.incomplete.items()]
    return "results may be missing: " + "; ".join(parts)


# ---------------------------------------------------------------------------------------------- route


def _message(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        loc = [str(p) for p in error.get("loc", ())][1:]  # drop "body"
        parts.append(f"{'.'.join(loc) or 'body'}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


class _RetrieveApiRoute(APIRoute):
    """The design's error shape, ``{code, message}``, for this route's errors (the other routes keep
    fastrag's ``{error, message, detail}``)."""

    def get_route_handler(self) -> Callable[..., Any]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Any:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return JSONResponse({"code": "VALIDATION_ERROR", "message": _message(exc)}, status_code=400)
            except ServeError as exc:
                code = exc.body["error"] if exc.body["error"].isupper() else _CODES.get(exc.status, exc.body["error"].upper())
                headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
                return JSONResponse({"code": code, "message": exc.body["message"]}, status_code=exc.status,
                                    headers=headers)  # fmt: skip

        return route


def retrieve_api_route(
    app: FastAPI, *, limits: ServeLimits, subspaces: frozenset[str], caller: Callable[..., Any],
    open_kb: Callable[..., KnowledgeBase], timed_out: Callable[..., ServeError], store_of: Callable[..., str],
) -> None:  # fmt: skip
    """Add ``POST /v1/retrieve`` to ``app`` (the helpers are the app's own: auth, lookup, time limit)."""
    router = APIRouter(route_class=_RetrieveApiRoute)
    errors = {status: {"model": RetrieveApiError, "description": text} for status, text in (
        (400, "VALIDATION_ERROR: the body is refused (message says why)"), (401, "UNAUTHORIZED"), (403, "FORBIDDEN"),
        (404, "NOT_FOUND: no such knowledge base"), (503, "RETRIEVAL_FAILED: a store or model is down"))}  # fmt: skip

    @router.post("/v1/retrieve", response_model=RetrieveApiResponse, tags=["retrieval"], responses=errors,  # type: ignore[arg-type]
                 summary="the Retrieve API: the best chunks of a knowledge base for a text query")  # fmt: skip
    async def retrieve_api(body: RetrieveApiRequest, request: Request,
                           binding: TokenBinding | None = Depends(caller)) -> RetrieveApiResponse:  # noqa: B008  # fmt: skip
        name = body.knowledge_base_name
        kb = open_kb(name, request, binding)
        text = body.retrieval_query.text
        if len(text) > limits.retrieve_api_max_text_chars:
            raise _invalid("retrievalQuery.text", f"is {len(text)} characters long; the limit on this route is "
                                                  f"{limits.retrieve_api_max_text_chars}")  # fmt: skip
        settings = search_request(body, kb, max_top_k=limits.max_top_k)
        node = search_filter(body, kb, subspaces=name in subspaces)
        scope = dict(binding.scope) if binding is not None else {}
        try:
            with anyio.fail_after(limits.request_timeout):
                response = await kb.search_result(text, filter=node, **scope, **settings)
        except FilterError as exc:
            raise _invalid("filter", str(exc).replace("(at $.andAll[0]", "(at $")) from exc
        except (InvalidParameterError, ConfigurationError) as exc:
            raise ServeError(400, "VALIDATION_ERROR", str(exc)) from exc
        except TimeoutError as exc:
            raise timed_out(kb) from exc
        request.scope["fastrag"]["timings"] = dict(response.timings)
        request.scope["fastrag"]["strategy"] = response.strategy
        if response.retrieval_failed:
            assert response.error is not None
            raise ServeError(503, "RETRIEVAL_FAILED", f"retrieval failed ({store_of(kb, response.error)}): "
                             f"{type(response.error).__name__}: {response.error}")  # fmt: skip
        ranked = sorted(response.documents, key=lambda d: -(d.score or 0.0))  # stable: already best first
        return RetrieveApiResponse(
            code="SUCCESS" if response.complete else "PARTIAL_SUCCESS",
            data=RetrievalData(retrieval_results=[_result(doc) for doc in ranked]),
            message="" if response.complete else _missing(response),
        )

    app.include_router(router)
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        """The app's schema, without the 422 every other route answers: this one answers 400."""
        if app.openapi_schema is None:
            generate()["paths"]["/v1/retrieve"]["post"]["responses"].pop("422", None)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]
