"""What every framework adapter shares: the fastrag retriever it calls, with which ``k`` and filter, and each
result's metadata as plain data. No framework is imported here."""

from __future__ import annotations

from typing import Any

from fastrag.errors import ConfigurationError, FilterError
from fastrag.filters import FilterLike, is_native_filter, parse_filter
from fastrag.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever
from fastrag.models import Document, plain_value
from fastrag.protocols import Retriever
from fastrag.retrieval._validation import check_k

__all__ = ["DEFAULT_K", "check_filter", "check_k", "missing_framework", "plain_metadata", "refuse_filter_object", "resolve_k", "search", "target"]

DEFAULT_K = 10
"""``k`` for a retriever other than a knowledge base's when none is given: :meth:`Retriever.retrieve`'s own
default (a knowledge base's is its resolved ``top_k``)."""


def target(obj: Any) -> Retriever:
    """The fastrag retriever an adapter calls: ``obj.as_retriever()`` for a knowledge base, ``obj`` itself for
    any :class:`~fastrag.protocols.Retriever`.

    Raises:
        ConfigurationError: ``obj`` is neither.
    """
    if isinstance(obj, KnowledgeBase):
        return obj.as_retriever()
    if isinstance(obj, Retriever):
        return obj
    raise ConfigurationError(
        f"retriever must be a fastrag KnowledgeBase or a fastrag Retriever (an object with async retrieve(query, *, "
        f"k, filter)), got {obj!r}"
    )


def resolve_k(k: Any, retriever: Retriever) -> int:
    """``k`` checked (an int in ``[1, 10000]``), or, when ``None``, the retriever's default: a knowledge base's
    resolved ``top_k`` (its ``as_retriever`` settings, then its own, then the system default: 20), else
    :data:`DEFAULT_K`.

    Raises:
        InvalidParameterError: ``k`` is not such an int, or the knowledge base's settings do not resolve.
    """
    if k is not None:
        return check_k(k)
    if isinstance(retriever, KnowledgeBaseRetriever):
        return retriever.knowledge_base.resolve(**retriever.settings).top_k
    return DEFAULT_K


def check_filter(filter: Any) -> Any:
    """A fastrag filter in its JSON form (a mapping or a JSON string) or an AST node, parsed now so a malformed
    one is refused where it is given, not at the first question; a backend's native filter object passes
    through for its store to accept or refuse (see :func:`~fastrag.filters.is_native_filter`).

    Raises:
        FilterError: the filter is malformed (its ``path`` names the bad node).
    """
    if filter is None or is_native_filter(filter):
        return filter
    return parse_filter(filter)


async def search(retriever: Retriever, query: str, *, k: int, filter: FilterLike | Any | None) -> list[Document]:
    """``retriever.retrieve(query, k=k, filter=filter)``: the one call every adapter makes.

    Raises:
        whatever the retriever raises (see :meth:`~fastrag.knowledge_base.KnowledgeBase.search`).
    """
    return await retriever.retrieve(query, k=k, filter=filter)


def plain_metadata(doc: Document) -> dict[str, Any]:
    """The document's metadata as plain dicts and lists (``score``, ``rank``, ``branches``, ``source_uri`` and
    the rest), a new dict the framework may change."""
    return plain_value(doc.metadata)


def missing_framework(module: str, framework: str, install: str, exc: ImportError) -> ImportError:
    """The ``ImportError`` an adapter module raises when its framework is not installed (or fails to import);
    ``install`` is the ``pip install`` line to run."""
    return ImportError(f"{module} needs {framework}: {install} ({type(exc).__name__}: {exc})",
                       name=getattr(exc, "name", None))  # fmt: skip


def refuse_filter_object(filter: Any, framework: str) -> None:
    """Refuse a framework's own filter object where fastrag's JSON form is expected.

    Raises:
        FilterError: always.
    """
    raise FilterError(
        f"{type(filter).__name__} is {framework}'s filter type; pass a fastrag filter in its JSON form instead, "
        'such as {"equals": {"key": "lang", "value": "en"}} (see fastrag.filters)'
    )
