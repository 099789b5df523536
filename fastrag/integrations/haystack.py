"""A knowledge base (or any fastrag retriever) as a Haystack retriever component, and Haystack's filter syntax
translated to fastrag's filter AST.

Needs Haystack: ``pip install "fastrag-retrieval[haystack]"`` (``haystack-ai`` 3.4 or later).

::

    from haystack import Pipeline
    from fastrag import KnowledgeBase
    from fastrag.integrations.haystack import HaystackRetriever

    async with KnowledgeBase("sqlite:///kb.db") as kb:
        pipeline = Pipeline()
        pipeline.add_component("retriever", HaystackRetriever(kb, top_k=5))
        out = await pipeline.run_async({"retriever": {
            "query": "how are results fused?",
            "filters": {"field": "meta.lang", "operator": "==", "value": "en"},
        }})
        out["retriever"]["documents"]        # haystack Documents, best first, with score and meta

``run_async`` (what ``Pipeline.run_async`` calls) awaits the search natively on the caller's event loop;
``run`` (``Pipeline.run``) runs it through :func:`~fastrag.integrations.bridge.run_sync`, inside or outside a
running loop. Haystack 3 has one ``Pipeline`` with ``run`` and ``run_async`` (2.x's ``AsyncPipeline``).

Filters (:func:`translate_filters`) follow Haystack's documented filter syntax: a comparison
``{"field": "meta.year", "operator": ">=", "value": 2020}`` (operators ``==``, ``!=``, ``>``, ``>=``, ``<``,
``<=``, ``in``, ``not in``) or a logical node ``{"operator": "AND" | "OR" | "NOT", "conditions": [...]}``
(``NOT`` negates the AND of its conditions). They become fastrag's AST, which every store evaluates the same
way (:mod:`fastrag.filters`); where Haystack's semantics and fastrag's meet, they agree:

* ``!=`` and ``not in`` match a document without the field, as Haystack's do (fastrag's ``notEquals`` and
  ``notIn``); ``==``, ``in`` and the ranges never match one;
* ranges compare numbers, or ISO-8601 dates given as strings (a date without an offset is UTC on both sides);
  a list, or a string that is not an ISO-8601 date, as the value raises :class:`HaystackFilterError` /
  :class:`UnsupportedHaystackFilterError`, as Haystack raises ``FilterError``;
* ``in`` and ``not in`` need a list (a tuple is refused, as Haystack refuses it);
* a missing ``operator``, ``conditions``, ``field`` or ``value`` key, or an unknown operator, raises
  :class:`HaystackFilterError`.

What fastrag cannot express raises :class:`UnsupportedHaystackFilterError` before any search runs (nothing is
dropped):

* ``None`` as a value (``== None`` matches a missing field in Haystack, ``> None`` nothing; fastrag has no test
  for a missing key);
* a list or mapping as the value of ``==`` / ``!=``, and ``None`` or a list inside ``in`` / ``not in``;
* a field other than document metadata (``id``, ``content``, ``score``, ``embedding``, ...) and nested metadata
  paths (``meta.a.b``: a fastrag key is one top-level metadata field);
* a logical node with no conditions (Haystack: ``AND []`` matches everything, ``OR []`` and ``NOT []`` nothing);
* a range with a bool, or with a date string Haystack's lenient parser reads but ISO 8601 does not
  (``"Jan 1 2020"``).

Where both can express a filter but answer differently (documented, not translated away):

* equality follows fastrag: a bool equals only a bool (Python's ``1 == True``, which Haystack inherits, does not
  hold), and two date strings are equal only when they are the same string (Haystack also matches the same
  instant spelt differently, ``"2020-01-01T00:00:00"`` and ``"2020-01-01T00:00:00+00:00"``);
* a naive date is UTC in fastrag; Haystack gives a naive date the other side's time zone (the same result when
  the stored dates and the filter's are all naive, or all aware);
* a range over a field whose value is a string that is not a date does not match in fastrag; Haystack raises
  ``FilterError`` while filtering;
* a field without the ``meta.`` prefix that is not a Haystack ``Document`` attribute is read as a metadata key,
  as Haystack reads its legacy filters.

``tests/test_integrations_haystack.py`` runs Haystack's ``FilterDocumentsTest`` cases against this translation
over a real store, with Haystack's own ``document_matches_filter`` as the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields as dataclass_fields
from typing import Any

from fastrag.errors import FilterError, UnsupportedFilterError
from fastrag.filters import (
    MAX_FILTER_DEPTH,
    Comparison,
    Filter,
    and_all,
    not_all,
    or_all,
    parse_date,
)
import fastrag.integrations._adapter as _adapter
from fastrag.models import Document as FastragDocument

try:
    from haystack import Document, component
    from haystack.document_stores.types import FilterPolicy
    from haystack.document_stores.types.filter_policy import apply_filter_policy
    from haystack.errors import FilterError as HaystackError
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise _adapter.missing_framework(__name__, "Haystack (haystack-ai)", 'pip install "fastrag-retrieval[haystack]"', exc) from exc

__all__ = [
    "COMPARISON_OPERATORS",
    "LOGICAL_OPERATORS",
    "HaystackFilterError",
    "HaystackRetriever",
    "UnsupportedHaystackFilterError",
    "to_haystack_document",
    "translate_filters",
]

COMPARISON_OPERATORS: Mapping[str, str] = {
    "==": "equals", "!=": "notEquals", ">": "greaterThan", ">=": "greaterThanOrEquals", "<": "lessThan",
    "<=": "lessThanOrEquals", "in": "in", "not in": "notIn",
}  # fmt: skip
"""Haystack's comparison operators and the fastrag operator each becomes."""
LOGICAL_OPERATORS: tuple[str, ...] = ("AND", "OR", "NOT")
"""Haystack's logical operators: ``andAll``, ``orAll`` and ``notAll`` (NOT of the AND of the conditions)."""

_RANGES = (">", ">=", "<", "<=")
_SETS = ("in", "not in")
_META = "meta."


class HaystackFilterError(FilterError, HaystackError):
    """A malformed Haystack filter (a missing key, an unknown operator, a value of the wrong kind).

    Both a fastrag :class:`~fastrag.errors.FilterError` and a ``haystack.errors.FilterError``, so either
    ``except`` catches it; ``path`` names the bad node (``$.conditions[1].value``).
    """


class UnsupportedHaystackFilterError(UnsupportedFilterError, HaystackError):
    """A valid Haystack filter that fastrag's filter language cannot express (see the module docstring).

    Both a fastrag :class:`~fastrag.errors.UnsupportedFilterError` and a ``haystack.errors.FilterError``.
    """


def translate_filters(filters: Mapping[str, Any] | None) -> Filter | None:
    """Haystack's filter dict as a fastrag filter AST (see the module docstring for the semantics).

    Args:
        filters: ``None`` or ``{}`` (no filter), a comparison ``{"field", "operator", "value"}`` or a logical
            node ``{"operator", "conditions"}``, nested at most :data:`~fastrag.filters.MAX_FILTER_DEPTH` deep.

    Returns:
        The AST (``None`` for no filter).

    Raises:
        HaystackFilterError: the filter is malformed.
        UnsupportedHaystackFilterError: the filter is valid Haystack that fastrag cannot express.

    Examples:
        >>> from fastrag.filters import dump_filter
        >>> dump_filter(translate_filters({"operator": "AND", "conditions": [
        ...     {"field": "meta.year", "operator": ">=", "value": 2020},
        ...     {"field": "meta.lang", "operator": "in", "value": ["en", "de"]}]}))
        {'andAll': [{'greaterThanOrEquals': {'key': 'year', 'value': 2020}},
                    {'in': {'key': 'lang', 'value': ['en', 'de']}}]}
    """
    if filters is None:
        return None
    if not isinstance(filters, Mapping):
        raise HaystackFilterError(f"filters must be a dict, got {filters!r}")
    if not filters:
        return None
    return _node(filters, "$", 0)


def _node(condition: Any, path: str, depth: int) -> Filter:
    if not isinstance(condition, Mapping):
        raise HaystackFilterError(f"a condition must be a dict, got {condition!r}", path=path)
    if depth > MAX_FILTER_DEPTH:
        raise HaystackFilterError(f"filters nest deeper than {MAX_FILTER_DEPTH} levels", path=path)
    if "field" in condition:
        return _comparison(condition, path)
    if "operator" not in condition:
        raise HaystackFilterError(f"'operator' key missing in {dict(condition)!r}", path=path)
    if "conditions" not in condition:
        raise HaystackFilterError(f"'conditions' key missing in {dict(condition)!r}", path=path)
    _no_other_keys(condition, ("operator", "conditions"), path)
    operator, conditions = condition["operator"], condition["conditions"]
    if operator not in LOGICAL_OPERATORS:
        raise HaystackFilterError(f"unknown logical operator {operator!r}; valid: {list(LOGICAL_OPERATORS)}",
                                  path=f"{path}.operator")  # fmt: skip
    if not isinstance(conditions, list):
        raise HaystackFilterError(f"'conditions' must be a list, got {conditions!r}", path=f"{path}.conditions")
    if not conditions:
        raise UnsupportedHaystackFilterError(
            f"{operator} with no conditions: fastrag's logical operators need at least one (Haystack's empty AND "
            "matches every document, an empty OR or NOT none); drop the node or give it a condition",
            path=f"{path}.conditions",
        )
    children = [_node(child, f"{path}.conditions[{i}]", depth + 1) for i, child in enumerate(conditions)]
    return {"AND": and_all, "OR": or_all, "NOT": not_all}[operator](*children)


def _no_other_keys(condition: Mapping[str, Any], known: tuple[str, ...], path: str) -> None:
    other = sorted(str(key) for key in condition if key not in known)
    if other:
        raise HaystackFilterError(f"unknown key(s) {other} in a condition; expected {list(known)}", path=path)


_DOCUMENT_FIELDS = frozenset(f.name for f in dataclass_fields(Document))


def _metadata_key(field: Any, path: str) -> str:
    where = f"{path}.field"
    if not isinstance(field, str) or not field:
        raise HaystackFilterError(f"'field' must be a non-empty string, got {field!r}", path=where)
    if field.startswith(_META):
        key = field[len(_META):]
        if not key:
            raise HaystackFilterError(f"field {field!r} names no metadata key", path=where)
        if "." in key:
            raise UnsupportedHaystackFilterError(
                f"field {field!r} is a nested metadata path; a fastrag filter key is one top-level metadata field",
                path=where,
            )
        return key
    root = field.split(".", 1)[0]
    if root in _DOCUMENT_FIELDS:
        raise UnsupportedHaystackFilterError(
            f"field {field!r} is a Haystack Document attribute, not metadata; fastrag filters on metadata only "
            "(meta.<key>)",
            path=where,
        )
    if "." in field:
        raise UnsupportedHaystackFilterError(
            f"field {field!r} is a dotted path outside meta.; a fastrag filter key is one top-level metadata field",
            path=where,
        )
    return field  # Haystack reads a field that is no Document attribute as a metadata key (legacy filters)


def _comparison(condition: Mapping[str, Any], path: str) -> Comparison:
    for key in ("operator", "value"):
        if key not in condition:
            raise HaystackFilterError(f"{key!r} key missing in {dict(condition)!r}", path=path)
    _no_other_keys(condition, ("field", "operator", "value"), path)
    key = _metadata_key(condition["field"], path)
    operator, value = condition["operator"], condition["value"]
    where = f"{path}.value"
    if not isinstance(operator, str) or operator not in COMPARISON_OPERATORS:
        raise HaystackFilterError(f"unknown comparison operator {operator!r}; valid: {list(COMPARISON_OPERATORS)}",
                                  path=f"{path}.operator")  # fmt: skip
    if operator in _SETS:
        if not isinstance(value, list):
            raise HaystackFilterError(f"{operator!r} needs a list, got {type(value).__name__} {value!r}", path=where)
        for i, item in enumerate(value):
            if item is None or isinstance(item, list | tuple | Mapping):
                raise UnsupportedHaystackFilterError(
                    f"{operator!r} list items must be strings, numbers or bools in fastrag, got {item!r}",
                    path=f"{where}[{i}]",
                )
    elif value is None:
        what = "matches no document in Haystack" if operator in _RANGES else "tests for a missing field in Haystack"
        raise UnsupportedHaystackFilterError(
            f"{operator!r} with None {what}; fastrag's filters have no test for a missing key", path=where
        )
    elif operator in _RANGES:
        if isinstance(value, list | tuple | Mapping):
            raise HaystackFilterError(f"{operator!r} needs a number or an ISO-8601 date, got {value!r}", path=where)
        if isinstance(value, bool):
            raise UnsupportedHaystackFilterError(f"{operator!r} with a bool: fastrag ranges compare numbers and dates",
                                                 path=where)  # fmt: skip
        if isinstance(value, str) and parse_date(value) is None:
            raise UnsupportedHaystackFilterError(
                f"{operator!r} with the string {value!r}: fastrag compares strings only as ISO-8601 dates "
                "(YYYY-MM-DD, optionally with a time and an offset)",
                path=where,
            )
    elif isinstance(value, list | tuple | Mapping):
        raise UnsupportedHaystackFilterError(
            f"{operator!r} with a {type(value).__name__}: fastrag compares one string, number or bool", path=where
        )
    try:
        return Comparison(COMPARISON_OPERATORS[operator], key, value)
    except FilterError as exc:  # a value fastrag's AST refuses (NaN, a lone surrogate, an object)
        raise UnsupportedHaystackFilterError(str(exc), path=path) from exc


def to_haystack_document(doc: FastragDocument) -> Document:
    """A fastrag result as a Haystack ``Document``: the same ``id`` and ``content``, ``score``, and fastrag's
    metadata as plain data in ``meta`` (``score``, ``rank``, ``branches``, ``source_uri``, ...)."""
    return Document(id=doc.id, content=doc.content, meta=_adapter.plain_metadata(doc), score=doc.score)


@component
class HaystackRetriever:
    """A Haystack retriever component over a fastrag knowledge base or retriever.

    Inputs: ``query`` (str), ``filters`` (Haystack's filter syntax, translated by :func:`translate_filters`),
    ``top_k``. Output: ``documents``, Haystack ``Document``\\ s best first (see :func:`to_haystack_document`):
    ``score`` is fastrag's (higher is better; the range is the last stage's, see
    :attr:`~fastrag.knowledge_base.SearchResponse.documents`); ``meta`` holds ``score``, zero-based ``rank``,
    ``branches`` and ``source_uri`` with the document's own metadata.

    Args:
        retriever: a :class:`~fastrag.knowledge_base.KnowledgeBase` (searched through
            :meth:`~fastrag.knowledge_base.KnowledgeBase.as_retriever`: its settings, no scope) or any fastrag
            :class:`~fastrag.protocols.Retriever`, such as ``kb.as_retriever(mode="keyword", user_id="alice")``.
        filters: Haystack filters every run applies (combined with a run's by ``filter_policy``).
        top_k: documents to return (1 to 10,000); ``None``: a knowledge base's resolved ``top_k`` (20 unless
            set), 10 for another retriever. A run's ``top_k`` replaces it.
        filter_policy: ``FilterPolicy.REPLACE`` (a run's filters replace ``filters``) or ``FilterPolicy.MERGE``
            (combined as Haystack's ``apply_filter_policy`` combines them), as Haystack's own retrievers.

    The component holds live objects (the knowledge base), so a pipeline holding it does not serialise
    (``Pipeline.dumps``): build it in code.

    Raises:
        ConfigurationError: (at construction) ``retriever`` is neither a knowledge base nor a retriever.
        InvalidParameterError: ``top_k`` is not an int in [1, 10000]; an invalid query.
        HaystackFilterError, UnsupportedHaystackFilterError: see :func:`translate_filters` (at construction for
            ``filters``, at the run for a run's).
        BackendError, EmbeddingError, RerankerError: the search failed (see
            :meth:`~fastrag.knowledge_base.KnowledgeBase.search`).
    """

    def __init__(
        self,
        retriever: Any,
        *,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        filter_policy: FilterPolicy | str = FilterPolicy.REPLACE,
    ) -> None:
        self.retriever = _adapter.target(retriever)
        translate_filters(filters)  # refused now, not at the first run
        self.filters = filters
        self.top_k = None if top_k is None else _adapter.check_k(top_k, name="top_k")
        self.filter_policy = FilterPolicy.from_str(filter_policy) if isinstance(filter_policy, str) else filter_policy

    def _plan(self, filters: dict[str, Any] | None, top_k: int | None) -> tuple[int, Filter | None]:
        combined = apply_filter_policy(self.filter_policy, self.filters, filters)
        k = _adapter.resolve_k(self.top_k if top_k is None else top_k, self.retriever)
        return k, translate_filters(combined)

    async def _search(self, query: str, filters: dict[str, Any] | None, top_k: int | None) -> dict[str, list[Document]]:
        k, node = self._plan(filters, top_k)
        found = await _adapter.search(self.retriever, query, k=k, filter=node)
        return {"documents": [to_haystack_document(doc) for doc in found]}

    @component.output_types(documents=list[Document])
    def run(self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None) -> dict[str, list[Document]]:
        """The documents for ``query``, synchronously (through :func:`~fastrag.integrations.bridge.run_sync`)."""
        from fastrag.integrations.bridge import run_sync

        return run_sync(self._search, query, filters, top_k)

    @component.output_types(documents=list[Document])
    async def run_async(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None
    ) -> dict[str, list[Document]]:
        """The documents for ``query``, awaited on the caller's event loop."""
        return await self._search(query, filters, top_k)
