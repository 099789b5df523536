"""Tenant scoping: a retriever bound to one tenant (a user, an organisation, an agent) sees only its documents."""

from __future__ import annotations

import logging

from fastrag.filters import Comparison, FilterLike, combine_filters, matches
from fastrag.models import Document
from fastrag.protocols import Retriever
from fastrag.retrieval._validation import check_k, check_query
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset, retrieve_page
from fastrag.retrieval.result import ReturnsResult
from fastrag.scoping import DEFAULT_TENANT_KEY, tenant_filter  # defined below the stores, re-exported here

__all__ = ["DEFAULT_TENANT_KEY", "TenantScopedRetriever", "tenant_filter"]

logger = logging.getLogger("fastrag.retrieval")

class TenantScopedRetriever(ReturnsResult):
    """Wraps any retriever so that every call is restricted to one tenant's documents.

    Every call's filter becomes ``equals(tenant_key, tenant) AND <the call's filter>`` before the wrapped
    retriever sees it. Retrievers pass the call filter down to every stage and branch (a hybrid gives it
    to each branch; a branch's own fixed filter is AND-ed with it, never replaces it), and stores apply it
    before ranking, so a top-k is the tenant's top-k. As a second line of defence, any returned document
    whose metadata does not match the tenant filter (a third-party stage that dropped the filter) is
    removed and the leak logged at ERROR; the call never returns another tenant's document.

    Documents must carry the tenant under ``tenant_key``; :class:`~fastrag.vector_store.tenant.TenantScopedStore`
    stamps it on every write (and ingestion through it).

    Args:
        retriever: any :class:`~fastrag.protocols.Retriever` (a hybrid, a path filter, a stack of them).
        tenant: the tenant's id (a non-empty str, or an int).
        tenant_key: the metadata key holding the tenant id (default ``"tenant_id"``).
        limits: bounds on ``k`` and the query (default :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`).

    Raises:
        InvalidParameterError: a bad ``tenant`` or ``tenant_key`` (see :func:`tenant_filter`); from
            :meth:`retrieve`, a bad ``k`` or query, before the wrapped retriever runs.
        FilterError: from :meth:`retrieve`, a malformed call filter.
    """

    accepts_offset = True  # retrieve(..., offset=): fastrag.protocols.SupportsOffset

    def __init__(
        self,
        retriever: Retriever,
        *,
        tenant: str | int,
        tenant_key: str = DEFAULT_TENANT_KEY,
        limits: RetrievalLimits = DEFAULT_LIMITS,
    ) -> None:
        self._scope = tenant_filter(tenant, tenant_key)
        self.retriever = retriever
        self.tenant = tenant
        self.tenant_key = tenant_key
        self.limits = limits
        self.name: str = getattr(retriever, "name", None) or "retriever"

    @property
    def scope(self) -> Comparison:
        """The filter AND-ed into every call: ``equals(tenant_key, tenant)``."""
        return self._scope

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` of the tenant's documents for ``query`` matching ``filter``, best first; ``offset``
        skips that many (:mod:`fastrag.retrieval.pagination`)."""
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        node = combine_filters(self._scope, filter)
        found = await retrieve_page(self.retriever, query, k=k, offset=offset, filter=node)
        kept = [doc for doc in found if matches(self._scope, doc.metadata)]
        if len(kept) == len(found):
            return found
        logger.error(
            "tenant isolation: %r returned %d document(s) outside tenant %s=%r; they were removed",
            self.retriever, len(found) - len(kept), self.tenant_key, self.tenant,
        )  # fmt: skip
        return [doc.ranked(score=doc.score, rank=offset + rank) for rank, doc in enumerate(kept)]

    def __repr__(self) -> str:
        return f"TenantScopedRetriever({self.retriever!r}, tenant={self.tenant!r}, tenant_key={self.tenant_key!r})"
