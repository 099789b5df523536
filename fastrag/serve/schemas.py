"""The JSON bodies of ``fastrag serve``: requests (validated by pydantic, so a bad field is a 422 naming it)
and responses (which the OpenAPI schema at ``/openapi.json`` describes).

The schema's bounds are the SDK's hard limits (10,000 results, 8,192-character queries); the service's
configured :class:`~fastrag.serve.config.ServeLimits` may be lower and are checked on each request, with the
same 422 shape.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from fastrag.retrieval.limits import MAX_K, MAX_QUERY_CHARS
from fastrag.scoping import MAX_SCOPE_INT, MIN_SCOPE_INT
from fastrag.search_settings import MAX_RANK_CONSTANT, MAX_WEIGHT

__all__ = [
    "AddDocumentsRequest",
    "AddDocumentsResponse",
    "AskRequest",
    "AskResponse",
    "BranchFailure",
    "Citation",
    "DeleteDocumentsRequest",
    "DeleteDocumentsResponse",
    "DocumentIn",
    "ErrorResponse",
    "FusionOptions",
    "RerankOptions",
    "RetrieveRequest",
    "RetrieveResponse",
    "RetrievedChunk",
    "SettingValue",
]

TenantValue = Annotated[StrictStr, Field(min_length=1, max_length=256)] | Annotated[
    StrictInt, Field(ge=MIN_SCOPE_INT, le=MAX_SCOPE_INT)
]
"""A tenant key's value: a non-empty string or a signed 64-bit integer (as the SDK's scopes)."""


def _whole(value: Any) -> Any:
    """A whole-number float (``5.0``) as an int: JSON has one number type, and JSON Schema's ``integer``
    accepts ``5.0``. Strings and fractions stay as they are, to be refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Count = Annotated[StrictInt, BeforeValidator(_whole)]
"""An integer field: a JSON integer, or a number with no fractional part (``10.0``); never a string."""


def _bad_value(value: Any, path: str) -> str | None:
    """Where ``value`` holds something no store can keep: a lone surrogate, NaN or an infinity."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{path}: a string with a lone surrogate (not valid Unicode)"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{path}: {value!r} is not a finite number"
    elif isinstance(value, dict):
        for key, item in value.items():
            found = _bad_value(key, f"{path}.{key!s}") or _bad_value(item, f"{path}.{key!s}")
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _bad_value(item, f"{path}[{i}]")
            if found:
                return found
    return None


class StrictBody(BaseModel):
    """A request body: unknown fields are refused, and so are values no store can keep (lone surrogates,
    NaN, infinities: Python's JSON parser accepts the last two although JSON has no such numbers)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        found = _bad_value(data, "$")
        if found:
            raise ValueError(found)
        return data


class FusionOptions(StrictBody):
    """How a hybrid search fuses its dense (k-NN) and BM25 lists; each unset field inherits."""

    method: Literal["weighted", "rrf"] | None = Field(
        None, description="'weighted' (min-max normalised scores, weighted sum) or 'rrf' (Cormack et al. 2009)"
    )
    vector_weight: float | None = Field(None, ge=0, le=MAX_WEIGHT, description="weight of the dense branch")
    keyword_weight: float | None = Field(None, ge=0, le=MAX_WEIGHT, description="weight of the BM25 branch")
    rank_constant: float | None = Field(None, gt=0, le=MAX_RANK_CONSTANT, description="RRF's k (60 by default)")


class RerankOptions(StrictBody):
    """Reranking with the knowledge base's configured ``rerank_model`` (a request cannot name a model: that
    would let callers load arbitrary models or files on the server)."""

    enabled: StrictBool | None = Field(None, description="rerank the first stage's retrieval_k candidates")
    retrieval_k: Count | None = Field(None, ge=1, le=MAX_K, description="candidates handed to the reranker")


class _Tenant(StrictBody):
    user_id: TenantValue | None = Field(None, description="confine the call to this tenant")
    agent_id: TenantValue | None = Field(None, description="confine the call to this agent")


Glob = Annotated[StrictStr, Field(min_length=1, max_length=1024)]


class RetrieveRequest(_Tenant):
    """``POST /v1/knowledge-bases/{name}/retrieve``. Every setting left out inherits the knowledge base's,
    then the system defaults (hybrid, weighted fusion, 20 results). The setting fields are the search options
    of :data:`fastrag.settings.OPTIONS` under the same names as in Python, TOML and the tool (a request cannot
    name a ``rerank_model``: that would let callers load arbitrary models or files on the server).

    Older forms still accepted: ``search_mode`` (``mode``), ``fusion`` as an object ``{method, vector_weight,
    keyword_weight, rank_constant}`` and ``rerank`` as an object ``{enabled, retrieval_k}``."""

    query: str = Field(..., min_length=1, max_length=MAX_QUERY_CHARS, description="the question (non-blank)")
    top_k: Count | None = Field(None, ge=1, le=MAX_K, description="how many results (at most the service's max_top_k)")
    offset: Count = Field(0, ge=0, le=MAX_K, description="skip this many results (offset=top_k is page 2)")
    filter: dict[str, Any] | None = Field(None, description="a fastrag filter in its JSON form (docs/filters.md)")
    mode: Literal["vector", "keyword", "hybrid", "auto"] | None = None
    search_mode: Literal["vector", "keyword", "hybrid", "auto"] | None = Field(None, description="older name of mode")
    candidate_k: Count | None = Field(None, ge=1, le=MAX_K, description="candidates per branch and for the reranker")
    retrieval_k: Count | None = Field(None, ge=1, le=MAX_K, description="older name of candidate_k")
    vector_candidate_k: Count | None = Field(None, ge=1, le=MAX_K, description="candidates of the dense branch")
    keyword_candidate_k: Count | None = Field(None, ge=1, le=MAX_K, description="candidates of the BM25 branch")
    fusion: Literal["weighted", "rrf"] | FusionOptions | None = Field(
        None, description="'weighted' (normalised scores, weighted sum) or 'rrf' (Cormack et al. 2009)")
    normalization: Literal["min_max", "z_score", "dbsf"] | None = Field(None, description="weighted fusion's normalisation")
    fusion_floor: float | None = Field(None, ge=0, lt=1, description="weighted fusion: where a branch's lowest match normalises")
    vector_weight: float | None = Field(None, ge=0, le=MAX_WEIGHT, description="weight of the dense branch")
    keyword_weight: float | None = Field(None, ge=0, le=MAX_WEIGHT, description="weight of the BM25 branch")
    rank_constant: float | None = Field(None, gt=0, le=MAX_RANK_CONSTANT, description="RRF's k (60 by default)")
    rerank: StrictBool | RerankOptions | None = Field(
        None, description="rerank candidate_k candidates with the knowledge base's rerank_model")
    mmr_lambda: float | None = Field(None, ge=0, le=1, description="diversify by MMR: relevance's share in [0, 1]")
    mmr_candidate_k: Count | None = Field(None, ge=1, le=MAX_K, description="candidates MMR chooses among")
    group_by: StrictStr | None = Field(None, min_length=1, max_length=256, description="one result per value of this key")
    group_score: Literal["max", "sum"] | None = None
    min_score: float | None = Field(
        None, description="drop results scoring below this on the result list's own scale: cosine (vector), BM25 "
                          "(keyword), the reranker's (with rerank); refused (422) for a fused list (hybrid, auto "
                          "without rerank): use min_relative_score there (docs/thresholds.md)")
    min_relative_score: float | None = Field(
        None, gt=0, description="hybrid, auto: keep results scoring at least this fraction of the query's best fused score")
    min_vector_score: float | None = Field(None, description="drop dense (k-NN) hits whose cosine is below this (before fusion)")
    min_keyword_score: float | None = Field(None, description="drop BM25 hits scoring below this (before fusion)")
    include_glob: Glob | list[Glob] | None = Field(None, description="keep results whose source_uri matches this "
                                                   "glob or one of these (at most 64)")
    exclude_glob: Glob | list[Glob] | None = Field(None, description="drop results whose source_uri matches this "
                                                   "glob or one of these (at most 64)")
    path_filter: StrictStr | None = Field(None, min_length=1, max_length=1024,
                                          description="keep results whose source_uri matches this regular expression")
    path_filter_timeout: float | None = Field(None, gt=0, le=60, description="seconds one search may spend in path_filter")
    language: StrictStr | None = Field(None, min_length=1, max_length=64,
                                       description="the question's language for BM25 (a language code), or auto")
    branch_timeout: float | None = Field(None, gt=0, le=3600, description="seconds each hybrid branch may take")
    on_branch_error: Literal["raise", "partial"] | None = None
    auto_direct_max: Count | None = Field(None, ge=0, le=MAX_K, description="auto: largest corpus searched exactly")
    auto_rerank_min: Count | None = Field(None, ge=1, description="auto: smallest corpus that gets the reranker")

    def settings(self) -> dict[str, Any]:
        """The search settings this body sets, by their :data:`fastrag.settings.OPTIONS` names (the older
        forms mapped onto them)."""
        from fastrag.settings import OPTIONS

        out: dict[str, Any] = {}
        for option in OPTIONS:
            if option.http and isinstance(getattr(self, option.name, None), str | int | float | bool | list):
                out[option.name] = getattr(self, option.name)
        if self.search_mode is not None:
            out["search_mode"] = self.search_mode
        if self.retrieval_k is not None:
            out["retrieval_k"] = self.retrieval_k
        if isinstance(self.fusion, FusionOptions):
            f = self.fusion
            out.update({k: v for k, v in (("fusion", f.method), ("vector_weight", f.vector_weight),
                        ("keyword_weight", f.keyword_weight), ("rank_constant", f.rank_constant)) if v is not None})  # fmt: skip
        if isinstance(self.rerank, RerankOptions):
            r = self.rerank
            out.update({k: v for k, v in (("rerank", r.enabled), ("candidate_k", r.retrieval_k)) if v is not None})
        return out


class SettingValue(BaseModel):
    """A resolved setting and where it came from."""

    value: Any
    origin: Literal["request", "knowledge_base", "default", "default:embedder"]


class RetrievedChunk(BaseModel):
    """One result."""

    document_id: str = Field(description="the source document: the chunk's parent_id, else the chunk's id")
    chunk_id: str = Field(description="the chunk's id (as written, in the caller's scope)")
    source: str | None = Field(description="the chunk's source_uri, if any")
    score: float | None = Field(description="higher is better; the range is the last stage's (docs/serve.md)")
    rank: int = Field(description="zero-based rank in the whole result list (offset included)")
    content: str
    metadata: dict[str, Any]


class BranchFailure(BaseModel):
    """Why one retrieval branch (``vector``, ``bm25``) failed."""

    error: str = Field(description="the error's type name")
    message: str
    store: str | None = None


class RetrieveResponse(BaseModel):
    """The results, best first, with the settings used and the retrieval status."""

    knowledge_base: str
    results: list[RetrievedChunk]
    strategy: str = Field(description="what ran: vector, keyword, hybrid or direct, with +rerank / +group")
    settings: dict[str, SettingValue]
    corpus_size: int | None = None
    partial: bool = Field(description="some branches failed; the results come from the others")
    failed_branches: dict[str, BranchFailure]
    timings: dict[str, float] = Field(description="seconds per stage")
    complete: bool = Field(description="false when results may be missing: a branch failed or was skipped, or a "
                                       "stage stopped early (incomplete)")
    incomplete: dict[str, str] = Field(default_factory=dict, description="{stage: why} for stages that may have "
                                       "missed matches (a path filter stopped at max_k candidates)")
    skipped_branches: dict[str, str] = Field(default_factory=dict, description="{branch: why} for hybrid branches "
                                             "not run (an embedder that does not cover the question's language)")
    zero_vector_branches: list[str] = Field(default_factory=list, description="dense branches whose question "
                                            "embedded to the zero vector (no word in the model's vocabulary)")


class ErrorResponse(BaseModel):
    """Every error: a machine-readable code, a message, and for failed retrievals the store and branches."""

    error: str = Field(description="invalid_request, unauthorized, forbidden, not_found, retrieval_failed, ...")
    message: str
    retrieval_failed: bool = False
    store: str | None = None
    failed_branches: dict[str, BranchFailure] = Field(default_factory=dict)
    detail: list[dict[str, Any]] | None = Field(None, description="for 422: each bad field's loc, msg and type")


class DocumentIn(StrictBody):
    """A document to write (a chunk: it is embedded and indexed as one)."""

    id: str = Field(..., min_length=1, max_length=1024)
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class AddDocumentsRequest(_Tenant):
    """``POST .../documents``: write (or replace, by id) documents into the caller's tenant."""

    documents: list[DocumentIn] = Field(..., min_length=1)


class AddDocumentsResponse(BaseModel):
    added: int


class DeleteDocumentsRequest(_Tenant):
    """``DELETE .../documents``: delete the tenant's documents by id and/or filter (at least one)."""

    ids: list[Annotated[str, Field(min_length=1, max_length=1024)]] | None = Field(None, min_length=1)
    filter: dict[str, Any] | None = None


class DeleteDocumentsResponse(BaseModel):
    deleted: int


class AskRequest(_Tenant):
    """``POST .../ask``: answer from the retrieved documents with the configured LLM, citing them."""

    question: str = Field(..., min_length=1, max_length=MAX_QUERY_CHARS)
    top_k: Count | None = Field(None, ge=1, le=MAX_K, description="documents the LLM reads")
    filter: dict[str, Any] | None = None


class Citation(BaseModel):
    number: int
    chunk_id: str
    source: str | None


class AskResponse(BaseModel):
    knowledge_base: str
    answer: str
    status: str = Field(description="answered, no_sources, retrieval_failed, ... (fastrag.querying.Answer)")
    grounded: bool
    partial: bool
    citations: list[Citation]
    sources: list[RetrievedChunk]
