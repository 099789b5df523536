"""Qdrant Edge (PyPI ``qdrant-edge-py``, ``import qdrant_edge``): Qdrant's own Rust engine in process.

Qdrant Edge takes its own filter classes (``qdrant_edge.Filter``, ``FieldCondition``, ``MatchValue``,
``RangeFloat`` ...), not qdrant-client's pydantic ``models``. :func:`to_edge_filter` converts a
``qdrant_client.models.Filter`` (the output of :func:`~fastrag.vector_store.qdrant.translate_filter`, or a
native one) into them, one node for one node, so the filter the Qdrant adapter sends a server is the filter
the edge engine runs. ``tests/test_qdrant_edge_filters.py`` runs the filter table and generated filters
through ``translate_filter`` and this conversion on a real edge shard against :func:`fastrag.filters.matches`.

The mapping (qdrant-client -> qdrant_edge)::

    Filter(must, should, must_not, min_should)   Filter(must, should, must_not, MinShould(conditions, min_count))
    FieldCondition(key, match=...)                FieldCondition(key, match=...)
      MatchValue / MatchAny / MatchExcept         MatchValue (a bool as numpy.bool_) / MatchAny / MatchExcept
      MatchText / MatchTextAny / MatchPhrase      MatchText / MatchTextAny / MatchPhrase
      MatchPrefix / MatchSubstring                MatchPrefix / MatchSubstring
    FieldCondition(key, range=Range(...))         FieldCondition(key, range=RangeFloat(...))
    FieldCondition(key, range=DatetimeRange(..))  FieldCondition(key, range=RangeDateTime(<ISO 8601 text>))
    FieldCondition(key, values_count=...)         FieldCondition(key, values_count=ValuesCount(...))
    FieldCondition(key, is_empty= / is_null=)     the same flags
    IsEmptyCondition(is_empty=PayloadField(k))    IsEmptyCondition(k)
    IsNullCondition(is_null=PayloadField(k))      IsNullCondition(k)
    HasIdCondition(has_id=[...])                  HasIdCondition({...})
    HasVectorCondition(has_vector=name)           HasVectorCondition(name)
    NestedCondition(nested=Nested(key, filter))   NestedCondition(key, <filter>)

Geo conditions have no counterpart here and raise :class:`~fastrag.errors.UnsupportedFilterError` (fastrag's
filter language never produces them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy

from fastrag.errors import ConfigurationError, UnsupportedFilterError

EDGE_INSTALL_HINT = 'pip install "fastrag-retrieval[qdrant-edge]"'


def import_edge() -> Any:
    """The ``qdrant_edge`` module, or :class:`ConfigurationError` with the install command."""
    try:
        import qdrant_edge
    except ImportError as exc:
        raise ConfigurationError(f"Qdrant Edge needs qdrant-edge-py: {EDGE_INSTALL_HINT}") from exc
    return qdrant_edge


def to_edge_filter(native: Any) -> Any:
    """Convert a ``qdrant_client.models.Filter`` into the equivalent ``qdrant_edge.Filter``.

    Pure: no shard is touched. Every node is converted or refused; none is dropped.

    Args:
        native: a ``qdrant_client.models.Filter`` (for example the output of ``translate_filter``).

    Returns:
        A ``qdrant_edge.Filter`` with the same conditions.

    Raises:
        UnsupportedFilterError: a condition has no Qdrant Edge counterpart here (geo conditions), or
            ``native`` is not a qdrant-client filter model.
        ConfigurationError: qdrant-edge-py or qdrant-client is not installed.
    """
    from fastrag.vector_store.qdrant.connection import import_models

    m = import_models()
    e = import_edge()
    if not isinstance(native, m.Filter):
        raise UnsupportedFilterError(f"to_edge_filter takes a qdrant_client.models.Filter, got {type(native).__name__}")
    return _filter(m, e, native, "$")


def _listed(value: Any) -> list[Any] | None:
    if value is None:
        return None
    return list(value) if isinstance(value, list | tuple) else [value]


def _filter(m: Any, e: Any, node: Any, path: str) -> Any:
    parts: dict[str, Any] = {}
    for name in ("must", "should", "must_not"):
        items = _listed(getattr(node, name))
        if items is not None:
            parts[name] = [_condition(m, e, c, f"{path}.{name}[{i}]") for i, c in enumerate(items)]
    if node.min_should is not None:
        conditions = [
            _condition(m, e, c, f"{path}.min_should.conditions[{i}]")
            for i, c in enumerate(node.min_should.conditions)
        ]
        parts["min_should"] = e.MinShould(conditions=conditions, min_count=node.min_should.min_count)
    return e.Filter(**parts)


def _condition(m: Any, e: Any, node: Any, path: str) -> Any:
    if isinstance(node, m.Filter):
        return _filter(m, e, node, path)
    if isinstance(node, m.FieldCondition):
        return _field(m, e, node, path)
    if isinstance(node, m.IsEmptyCondition):
        return e.IsEmptyCondition(key=node.is_empty.key)
    if isinstance(node, m.IsNullCondition):
        return e.IsNullCondition(key=node.is_null.key)
    if isinstance(node, m.HasIdCondition):
        return e.HasIdCondition(point_ids={str(i) if not isinstance(i, int) else i for i in node.has_id})
    if isinstance(node, m.HasVectorCondition):
        return e.HasVectorCondition(vector=node.has_vector)
    if isinstance(node, m.NestedCondition):
        return e.NestedCondition(key=node.nested.key, filter=_filter(m, e, node.nested.filter, f"{path}.nested"))
    raise UnsupportedFilterError(f"{type(node).__name__} has no Qdrant Edge counterpart here", path=path)


def _bounds(node: Any, convert: Any) -> dict[str, Any]:
    return {k: convert(getattr(node, k)) for k in ("gt", "gte", "lt", "lte") if getattr(node, k) is not None}


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _field(m: Any, e: Any, node: Any, path: str) -> Any:
    args: dict[str, Any] = {"key": node.key}
    if node.match is not None:
        args["match"] = _match(m, e, node.match, f"{path}.match")
    if node.range is not None:
        if isinstance(node.range, m.DatetimeRange):
            args["range"] = e.RangeDateTime(**_bounds(node.range, _iso))
        else:
            args["range"] = e.RangeFloat(**_bounds(node.range, float))
    if node.values_count is not None:
        args["values_count"] = e.ValuesCount(**_bounds(node.values_count, int))
    if node.is_empty is not None:
        args["is_empty"] = node.is_empty
    if node.is_null is not None:
        args["is_null"] = node.is_null
    if node.geo_bounding_box is not None or node.geo_radius is not None or node.geo_polygon is not None:
        raise UnsupportedFilterError("geo conditions are not converted for Qdrant Edge", path=path)
    return e.FieldCondition(**args)


def _match(m: Any, e: Any, match: Any, path: str) -> Any:
    if isinstance(match, m.MatchValue):
        return _match_value(e, match.value, path)
    if isinstance(match, m.MatchAny):
        return e.MatchAny(any=list(match.any))
    if isinstance(match, m.MatchExcept):
        return e.MatchExcept(list(match.except_))  # the keyword is `except` (the stub says except_)
    if isinstance(match, m.MatchPrefix):
        return e.MatchPrefix(prefix=match.prefix)
    if isinstance(match, m.MatchSubstring):
        return e.MatchSubstring(substring=match.substring)
    if isinstance(match, m.MatchText):
        return e.MatchText(text=match.text)
    if isinstance(match, m.MatchTextAny):
        return e.MatchTextAny(text_any=match.text_any)
    if isinstance(match, m.MatchPhrase):
        return e.MatchPhrase(phrase=match.phrase)
    raise UnsupportedFilterError(f"{type(match).__name__} has no Qdrant Edge counterpart here", path=path)


def _match_value(e: Any, value: Any, path: str) -> Any:
    # qdrant-edge-py 0.9 reads a Python bool as the integer 1 or 0 (it tries an integer before a bool, and
    # bool is a subclass of int), so MatchValue(True) would match the integer 1 and never a stored true.
    # numpy.bool_ is no int, so it reaches the bool branch. The check below refuses any value that does not
    # come back as itself rather than run a different filter.
    native = e.MatchValue(value=numpy.bool_(value) if isinstance(value, bool) else value)
    if type(native.value) is not type(value) or native.value != value:
        raise UnsupportedFilterError(
            f"Qdrant Edge reads the match value {value!r} as {native.value!r}", path=f"{path}.value"
        )
    return native
