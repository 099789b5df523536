"""Tenant scoping: a retriever bound to one tenant (a user, an organisation, an agent) sees only its documents.

The scope, its filter and its second line of defence are :mod:`fastrag.scoping`'s; ``DEFAULT_TENANT_KEY``
and :func:`tenant_filter` are importable from here as before.
"""

from __future__ import annotations

from typing import cast

from fastrag.filters import Comparison, FilterLike
from fastrag.models import Document
from fastrag.protocols import Retriever
from fastrag.retrieval._validation import check_k, check_query
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.pagination import check_offset, retrieve_page
from fastrag.retrieval.result import ReturnsResult
from fastrag.scoping import DEFAULT_TENANT_KEY, scoped_statistics, tenant_filter, tenant_scope  # re-exported here

__all__ = ["DEFAULT_TENANT_KEY", "TenantScopedRetriever", "tenant_filter"]


class TenantScopedRetriever(ReturnsResult):
    """Wraps any retriever so that every call is restricted to one tenant's documents.

    Every call's filter becomes ``equals(tenant_key, tenant) AND <the call's filter>`` before the wrapped
    retriever sees it. Retrievers pass the call filter down to every stage and branch (a hybrid gives it
    to each branch; a branch's own fixed filter is AND-ed with it, never replaces it), and stores apply it
    before ranking, so a top-k is the tenant's top-k. As a second line of defence, any returned document
    whose metadata does not match the tenant filter (a third-party stage that dropped the filter) is
    removed and the leak logged at ERROR; the call never returns another tenant's document.

    BM25 branches below it score with the tenant's own statistics (document count, document frequencies,
    mean length) where their store offers :class:`~fastrag.protocols.SupportsScopedStatistics` (SQLite,
    PostgreSQL; :func:`fastrag.scoping.scoped_statistics`), so the tenant's keyword scores do not depend on
    other tenants' documents; a store that computes BM25 over its whole collection cannot (see
    ``docs/reliability.md``, "BM25 statistics and tenants").

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
        self._tenant = tenant_scope(tenant, tenant_key)
        self.retriever = retriever
        self.tenant = tenant
        self.tenant_key = tenant_key
        self.limits = limits
        self.name: str = getattr(retriever, "name", None) or "retriever"

    @property
    def scope(self) -> Comparison:
        """The filter AND-ed into every call: ``equals(tenant_key, tenant)``."""
        return cast(Comparison, self._tenant.filter)

    async def retrieve(
        self, query: str, *, k: int = 10, filter: FilterLike | None = None, offset: int = 0  # noqa: A002
    ) -> list[Document]:
        """Up to ``k`` of the tenant's documents for ``query`` matching ``filter``, best first; ``offset``
        skips that many (:mod:`fastrag.retrieval.pagination`)."""
        check_query(query, self.limits)
        check_k(k, self.limits)
        check_offset(offset, k, self.limits)
        node = self._tenant.confine(filter)
        with scoped_statistics(self._tenant.filter):  # BM25 below counts the tenant's documents only
            found = await retrieve_page(self.retriever, query, k=k, offset=offset, filter=node)
        return self._tenant.kept(found, offset=offset, source=self.retriever)

    def __repr__(self) -> str:
        return f"TenantScopedRetriever({self.retriever!r}, tenant={self.tenant!r}, tenant_key={self.tenant_key!r})"
