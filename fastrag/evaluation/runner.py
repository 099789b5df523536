"""Run a retriever over a query set concurrently and collect its rankings for :func:`evaluate`."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import anyio

from fastrag.errors import InvalidParameterError
from fastrag.protocols import Retriever

__all__ = ["run_retrieval"]


async def run_retrieval(
    retriever: Retriever,
    queries: Mapping[str, str],
    *,
    k: int = 100,
    concurrency: int = 8,
    on_query_done: Callable[[], None] | None = None,
) -> dict[str, list[str]]:
    """Retrieve the top ``k`` documents for every query, at most ``concurrency`` queries in flight at once.

    Queries run in one anyio task group, throttled by an :class:`anyio.CapacityLimiter`. The first failure
    cancels the queries still running and propagates; no failure is swallowed and no partial run is
    returned.

    Args:
        retriever: any :class:`~fastrag.protocols.Retriever`; called as ``await retriever.retrieve(text,
            k=k)``, returning documents best first.
        queries: ``{query_id: query_text}``, e.g. :attr:`BeirDataset.queries`.
        k: how many documents to ask for per query, ``>= 1`` (use the largest cutoff you will evaluate).
        concurrency: the most queries awaiting the retriever at once, ``>= 1``.
        on_query_done: called with no argument after each query's answer arrives (a progress bar's tick).

    Returns:
        ``{query_id: [doc_id, ...]}``, best first, one entry per query in ``queries`` order; a list is as
        long as the retriever's answer (normally at most ``k``; it may be empty).

    Raises:
        InvalidParameterError: ``k < 1`` or ``concurrency < 1``.
        Exception: whatever ``retriever.retrieve`` raises, unchanged and with a note naming the query id.
            When several queries fail before cancellation takes effect, they arrive together in an
            :class:`ExceptionGroup`.
    """
    for name, value in (("k", k), ("concurrency", concurrency)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")

    results: dict[str, list[str]] = {}
    limiter = anyio.CapacityLimiter(concurrency)

    async def retrieve_one(query_id: str, text: str) -> None:
        async with limiter:
            try:
                documents = await retriever.retrieve(text, k=k)
            except Exception as exc:
                exc.add_note(f"while retrieving query {query_id!r}")
                raise
        results[query_id] = [document.id for document in documents]
        if on_query_done is not None:
            on_query_done()

    try:
        async with anyio.create_task_group() as task_group:
            for query_id, text in queries.items():
                task_group.start_soon(retrieve_one, query_id, text)
    except ExceptionGroup as group:
        # anyio 4 always wraps task failures in a group; hand a single failure back as itself so callers
        # can write a plain ``except``.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    return {query_id: results[query_id] for query_id in queries}
