"""A knowledge base as a function-calling tool: a JSON Schema for the model, an async callable for you.

::

    tool = kb.as_tool(user_id="alice")
    tools = [tool.openai()]            # {"type": "function", "function": {"name", "description", "parameters"}}
    tools = [tool.anthropic()]         # {"name", "description", "input_schema"}
    # ... the model answers with a tool call whose arguments are a JSON string:
    results = await tool(call.function.arguments)
    # [{"id", "content", "title", "source_uri", "headings", "score", "rank"}, ...]

The schema (:attr:`KnowledgeBaseTool.parameters`) is a JSON Schema object valid under Draft 7 and Draft
2020-12: ``query`` (a string with a non-space character, required), ``top_k`` (an integer in
``[1, max_top_k]``, or ``null``) and ``filter`` (a fastrag filter in its JSON form, see
:mod:`fastrag.filters`, or ``null``), with ``additionalProperties: false``. The filterable keys are defined
once, in ``$defs.key``, and referenced by every operator: with declared fields, an ``enum`` of them; without,
any key. Either way fastrag's internal keys (``content_hash``, ``chunker``, ``chunk_index``, ``parent_id``,
``section_index``, ``section_start``, ``section_end``) and the tenant keys (``user_id``, ``agent_id``, declared
``"tenant"`` fields, the keys the knowledge base has seen in scopes, the tool's own scope) are not offered, and
the callable refuses filters on them.

The callable checks every rule of the schema itself, so whatever the schema accepts passes the callable
except for what JSON Schema cannot express here (the callable raises a typed error for these):

* value types per field: with declared fields, a value must fit its field's type (an integer for a
  ``long``, an ISO-8601 date for a range on a ``date``, no ``equals`` on a ``list``, ...); the schema allows
  any scalar for every key (the description lists each field's type);
* nesting depth: logical operators nest at most :data:`~fastrag.filters.MAX_FILTER_DEPTH` (32) levels; a
  recursive ``$ref`` cannot bound its depth. Arguments nested too deeply for Python's JSON parser (about
  1,000 levels) raise :class:`~fastrag.errors.InvalidParameterError`;
* non-finite numbers: ``NaN`` and ``Infinity`` are not JSON, so a model cannot send them; the callable
  refuses them in a filter when they arrive in a mapping;
* ranges on strings must be ISO-8601 dates (the schema says so in a description only).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastrag.errors import FilterError, InvalidParameterError, UnknownParameterError
from fastrag.filters import (
    COMPARISON_OPERATORS,
    EQUALITY_OPERATORS,
    LIST_OPERATORS,
    RANGE_OPERATORS,
    SET_OPERATORS,
    STRING_OPERATORS,
    Filter,
    comparisons,
)
from fastrag.models import CHUNK_INDEX, CONTENT_HASH, HEADINGS, PARENT_ID, SOURCE_URI, TITLE, Document
from fastrag.retrieval.limits import MAX_K, MAX_QUERY_CHARS
from fastrag.search_settings import SearchSettings

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.knowledge_base import KnowledgeBase

__all__ = ["DEFAULT_MAX_TOP_K", "TOOL_NAME_PATTERN", "KnowledgeBaseTool"]

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
"""Tool names OpenAI and Anthropic both accept."""
DEFAULT_MAX_TOP_K = 50
"""The largest ``top_k`` a tool offers when ``max_top_k`` is not given (lower when the knowledge base cannot
serve it: see :meth:`KnowledgeBaseTool.for_knowledge_base`)."""

# built-in keys a function-calling tool does not offer (the model never sees their values)
_TOOL_HIDDEN_KEYS = frozenset(
    {CONTENT_HASH, "chunker", "section_index", "section_start", "section_end", CHUNK_INDEX, PARENT_ID}
)
_ARGUMENTS = ("query", "top_k", "offset", "filter")
_COMPARISON_DEFS = {"scalar": "comparison", "set": "set_comparison", "range": "range_comparison",
                    "string": "string_comparison"}  # fmt: skip


def _filter_defs(keys: list[str] | None, hidden: list[str]) -> dict[str, Any]:
    """``$defs`` for the filter JSON form: the filterable keys once (``key``), one comparison shape per value
    kind, and the recursive ``filter``. ``keys`` lists the allowed keys (``None``: any key but ``hidden``)."""
    key: dict[str, Any]
    if keys is not None:
        key = {"type": "string", "enum": keys}
    else:
        key = {"type": "string", "minLength": 1, "not": {"enum": hidden}}

    def comparison(value: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"key": {"$ref": "#/$defs/key"}, "value": value},
            "required": ["key", "value"],
            "additionalProperties": False,
        }

    defs: dict[str, Any] = {
        "key": key,
        "scalar": {"type": ["string", "number", "boolean"]},
        "comparison": comparison({"$ref": "#/$defs/scalar"}),
        "set_comparison": comparison({"type": "array", "items": {"$ref": "#/$defs/scalar"}}),
        "range_comparison": comparison({"type": ["number", "string"], "description": "a number or an ISO-8601 date"}),
        "string_comparison": comparison({"type": "string"}),
        "filters": {"type": "array", "items": {"$ref": "#/$defs/filter"}, "minItems": 1},
    }
    operators: dict[str, Any] = {}
    for op in COMPARISON_OPERATORS:
        if op in EQUALITY_OPERATORS or op in LIST_OPERATORS:
            kind = "scalar"
        elif op in SET_OPERATORS:
            kind = "set"
        elif op in RANGE_OPERATORS:
            kind = "range"
        else:
            assert op in STRING_OPERATORS
            kind = "string"
        operators[op] = {"$ref": f"#/$defs/{_COMPARISON_DEFS[kind]}"}
    operators["andAll"] = {"$ref": "#/$defs/filters"}
    operators["orAll"] = {"$ref": "#/$defs/filters"}
    operators["notAll"] = {"anyOf": [{"$ref": "#/$defs/filters"}, {"$ref": "#/$defs/filter"}]}
    defs["filter"] = {
        "type": "object",
        "description": "exactly one operator",
        "properties": operators,
        "minProperties": 1,
        "maxProperties": 1,
        "additionalProperties": False,
    }
    return defs


def _refuse_keys(node: Filter, hidden: frozenset[str]) -> None:
    """Raise FilterError (naming the node's path) when the filter names a key the tool does not offer."""
    for path, comparison in comparisons(node):
        if comparison.key in hidden:
            raise FilterError(
                f"this tool cannot filter on {comparison.key!r} (an internal or tenant key); filter on the keys the "
                "schema lists",
                path=f"{path}.{comparison.operator}.key",
            )


@dataclass(frozen=True, slots=True)
class KnowledgeBaseTool:
    """A search tool over a :class:`~fastrag.knowledge_base.KnowledgeBase`; build it with
    :meth:`~fastrag.knowledge_base.KnowledgeBase.as_tool`.

    Attributes:
        name: the tool's name.
        description: what the model reads about the tool.
        search_mode: the mode every call uses; ``None``: the knowledge base's, resolved at each call.
        top_k: results when the call gives no ``top_k``; ``None``: the knowledge base's.
        max_top_k: the largest ``top_k`` a call may ask for.
        group_by: one result per value of this metadata key (``"source_uri"``, ``"parent_id"``), each
            carrying the group's other matching passages under ``"more"``; ``None``: the knowledge base's.
        max_offset: the largest ``offset`` (results skipped, for the next page) a call may give.
        thresholds: the score thresholds every call applies (``{"min_score": 0.3}``, ...; see
            :class:`~fastrag.search_settings.SearchSettings`), set by the developer and not visible to the
            model; ``{}``: the knowledge base's.
        scope: the tenant every call is confined to (``{}``: none); not visible to the model.
        hidden_keys: metadata keys the tool neither offers nor accepts in a filter: fastrag's internal keys
            (``content_hash``, ``chunker``, ``chunk_index``, ``parent_id``, ``section_index``,
            ``section_start``, ``section_end``) and the tenant keys known when the tool was built.
    """

    name: str
    description: str
    search_mode: str | None
    top_k: int | None
    max_top_k: int
    scope: Mapping[str, str | int]
    group_by: str | None = None
    max_offset: int = 0
    thresholds: Mapping[str, float] = field(default_factory=dict)
    hidden_keys: frozenset[str] = field(repr=False, default=frozenset())
    knowledge_base: KnowledgeBase = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _schema: str = field(repr=False, compare=False, default="{}")

    @classmethod
    def for_knowledge_base(
        cls,
        knowledge_base: KnowledgeBase,
        *,
        name: str = "search_knowledge_base",
        description: str | None = None,
        search_mode: str | None = None,
        top_k: int | None = None,
        max_top_k: int | None = None,
        scope: Mapping[str, str | int] | None = None,
        group_by: str | None = None,
        min_score: float | None = None,
        min_relative_score: float | None = None,
        min_vector_score: float | None = None,
        min_keyword_score: float | None = None,
    ) -> KnowledgeBaseTool:
        """The tool for ``knowledge_base`` (what :meth:`~fastrag.knowledge_base.KnowledgeBase.as_tool` returns).

        ``max_top_k`` ``None`` offers :data:`DEFAULT_MAX_TOP_K` (50), or fewer when the knowledge base cannot
        serve that many: when its settings (with the tool's ``search_mode``) rerank with an explicit
        ``retrieval_k``, a call may ask for at most ``retrieval_k`` results. A call may page with ``offset``
        as long as ``offset + top_k`` stays within what the knowledge base can serve (``retrieval_k`` when
        it reranks, 10,000 otherwise): ``max_offset`` is that limit minus 1.

        Raises:
            InvalidParameterError: ``name`` does not match :data:`TOOL_NAME_PATTERN`; ``description`` is not a
                non-empty string; an unknown ``search_mode``; ``max_top_k`` not an int in [1, 10,000] or
                larger than the knowledge base can serve (see above); ``top_k`` not an int in [1,
                ``max_top_k``]; no ``scope`` on a knowledge base with ``require_scope`` (every call would
                fail); ``group_by`` not a non-empty string; a score threshold that is not a finite number
                (``min_relative_score``: > 0) or that the mode cannot apply (``min_score`` on a fused list,
                see :func:`~fastrag.retrieval.thresholds.check_thresholds_fit`).
        """
        if not isinstance(name, str) or not re.match(TOOL_NAME_PATTERN, name):
            raise InvalidParameterError(f"tool name must match {TOOL_NAME_PATTERN}, got {name!r}")
        if description is not None and (not isinstance(description, str) or not description.strip()):
            raise InvalidParameterError(f"description must be a non-empty string, got {description!r}")
        thresholds = {k: v for k, v in (("min_score", min_score), ("min_relative_score", min_relative_score),
                      ("min_vector_score", min_vector_score), ("min_keyword_score", min_keyword_score)) if v is not None}  # fmt: skip
        SearchSettings(search_mode=search_mode, group_by=group_by, **thresholds)  # validates the mode, key, thresholds
        scope = dict(scope or {})
        if knowledge_base.require_scope and not scope:
            raise InvalidParameterError(
                "this knowledge base requires a scope: bind the tool to a tenant with as_tool(user_id=, agent_id= "
                "or scope=)"
            )
        servable, why = MAX_K, ""
        # the thresholds must fit the mode the calls will resolve to (checked now, not at the model's first call)
        resolved = knowledge_base.resolve(**({} if search_mode is None else {"search_mode": search_mode}), **thresholds)
        if resolved.rerank and resolved.origin("retrieval_k") != "default":
            servable = resolved.retrieval_k
            why = f" (the knowledge base reranks retrieval_k={servable} candidates)"
        if max_top_k is None:
            max_top_k = min(DEFAULT_MAX_TOP_K, servable)
        elif isinstance(max_top_k, bool) or not isinstance(max_top_k, int) or not 1 <= max_top_k <= MAX_K:
            raise InvalidParameterError(f"max_top_k must be an int in [1, {MAX_K}], got {max_top_k!r}")
        elif max_top_k > servable:
            raise InvalidParameterError(f"max_top_k={max_top_k} is more than this knowledge base can serve{why}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= max_top_k):
            raise InvalidParameterError(f"top_k must be None or an int in [1, max_top_k={max_top_k}], got {top_k!r}")
        max_offset = servable - 1
        hidden = frozenset(_TOOL_HIDDEN_KEYS | knowledge_base.tenant_keys | set(scope))
        declared = knowledge_base.fields
        offered = None if declared is None else {k: t for k, t in sorted(declared.items()) if k not in hidden}
        if description is None:
            description = (
                "Search the knowledge base for passages relevant to a question. Returns the best passages first, "
                "each with id, content, title, source_uri, headings (the section's heading path), score (higher "
                "is more relevant) and rank (0 is best). For more results, call again with offset set to the number "
                "already read."
            )
            if group_by is not None:
                description += (
                    f" Results are one per {group_by}: each also lists, under more, the other matching passages "
                    "of the same source."
                )
            if offered is not None:
                listed = ", ".join(f"{k} ({'string or integer' if t == 'tenant' else t})" for k, t in offered.items())
                description += f" Filterable metadata fields: {listed}."
        schema = {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
                    "pattern": r"\S",
                    "description": "The question or keywords to search for.",
                },
                "top_k": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "maximum": max_top_k,
                    "description": "How many passages to return (optional).",
                },
                "offset": {
                    "type": ["integer", "null"],
                    "minimum": 0,
                    "maximum": max_offset,
                    "description": "How many of the best passages to skip, for the next page: 0 (default) for the "
                                   "first page, then the number already read (optional).",
                },
                "filter": {
                    "anyOf": [{"$ref": "#/$defs/filter"}, {"type": "null"}],
                    "description": (
                        'Optional metadata filter, one operator per object, e.g. {"equals": {"key": "title", '
                        '"value": "Tea"}} or {"andAll": [...]}. Operators: '
                        + ", ".join((*COMPARISON_OPERATORS, "andAll", "orAll", "notAll"))
                        + "."
                    ),
                },
            },
            "required": ["query"],
            "additionalProperties": False,
            "$defs": _filter_defs(None if offered is None else list(offered), sorted(hidden)),
        }
        return cls(
            name=name,
            description=description,
            search_mode=search_mode,
            top_k=top_k,
            max_top_k=max_top_k,
            scope=scope,
            group_by=group_by,
            max_offset=max_offset,
            thresholds=thresholds,
            hidden_keys=hidden,
            knowledge_base=knowledge_base,
            _schema=json.dumps(schema),
        )

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments (a fresh copy each time; see the module docstring)."""
        return json.loads(self._schema)

    def openai(self) -> dict[str, Any]:
        """``{"type": "function", "function": {"name", "description", "parameters"}}`` (OpenAI Chat
        Completions ``tools=``)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def anthropic(self) -> dict[str, Any]:
        """``{"name", "description", "input_schema"}`` (Anthropic Messages ``tools=``)."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}

    def check_arguments(self, arguments: Mapping[str, Any] | str | bytes) -> tuple[str, int | None, int, Any]:
        """Validate a call's arguments; return ``(query, top_k, offset, filter)`` (``top_k``/``filter``
        ``None`` and ``offset`` 0 when absent or JSON ``null``).

        Raises:
            InvalidParameterError: not a JSON object (or a str/bytes of one); nested too deeply to parse;
                ``query`` missing, not a string, blank or too long; ``top_k`` not an integer in ``[1,
                max_top_k]``; ``offset`` not an integer in ``[0, max_offset]``.
            UnknownParameterError: an argument other than ``query``, ``top_k``, ``offset``, ``filter``.
            FilterError: ``filter`` is not an object, is malformed, does not fit the declared fields, or
                names a key the tool does not offer (see :attr:`hidden_keys`).
        """
        try:
            return self._check_arguments(arguments)
        except RecursionError as exc:  # a deeply nested JSON text or mapping
            raise InvalidParameterError("tool arguments nest too deeply to parse") from exc

    def _check_arguments(self, arguments: Any) -> tuple[str, int | None, int, Any]:
        if isinstance(arguments, str | bytes):
            try:
                arguments = json.loads(arguments)
            except ValueError as exc:
                raise InvalidParameterError(f"tool arguments are not valid JSON: {exc}") from exc
        if not isinstance(arguments, Mapping):
            raise InvalidParameterError(f"tool arguments must be a JSON object, got {type(arguments).__name__}")
        unknown = sorted(str(k) for k in arguments if k not in _ARGUMENTS)
        if unknown:
            raise UnknownParameterError(f"unknown tool argument(s) {unknown}; accepted: {list(_ARGUMENTS)}")
        if "query" not in arguments:
            raise InvalidParameterError("the tool needs a query")
        query = arguments["query"]
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError(f"query must be a non-blank string, got {query!r}")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidParameterError(f"query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
        top_k = arguments.get("top_k")
        if top_k is not None:
            # JSON Schema's "integer" accepts 5.0, so the callable does too
            if isinstance(top_k, float) and math.isfinite(top_k) and top_k.is_integer():
                top_k = int(top_k)
            if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= self.max_top_k:
                raise InvalidParameterError(f"top_k must be an integer in [1, {self.max_top_k}], got {top_k!r}")
        offset = arguments.get("offset")
        if offset is None:
            offset = 0
        if isinstance(offset, float) and math.isfinite(offset) and offset.is_integer():
            offset = int(offset)
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= self.max_offset:
            raise InvalidParameterError(f"offset must be an integer in [0, {self.max_offset}], got {offset!r}")
        filter_ = arguments.get("filter")
        if filter_ is not None:
            if not isinstance(filter_, Mapping):
                raise FilterError(f"filter must be a JSON object, got {type(filter_).__name__}")
            filter_ = self.knowledge_base._filter(filter_)
            _refuse_keys(filter_, self.hidden_keys)
        return query, top_k, offset, filter_

    async def __call__(self, arguments: Mapping[str, Any] | str | bytes) -> list[dict[str, Any]]:
        """Run the search the model asked for.

        Args:
            arguments: the call's arguments, as a mapping or the JSON text (str or UTF-8 bytes) a model sends.

        Returns:
            A JSON-serialisable list, best first, of ``{"id", "content", "title", "source_uri", "headings",
            "score", "rank"}`` (``title``/``source_uri`` ``None`` when unknown; ``headings`` the heading path
            of the chunk's section, outermost first, as a list of str, or ``None``; ``score`` a finite float,
            higher is better, or ``None``; ``rank`` zero-based in the whole list, so a call with ``offset``
            starts at ``offset``). With ``group_by``, each also has ``"more"``: the group's other matching
            passages, best first, each ``{"id", "content", "headings", "score"}``.

        Raises:
            InvalidParameterError, UnknownParameterError, FilterError: bad arguments (see
                :meth:`check_arguments`); send ``str(error)`` back to the model so it can correct the call.
            BackendError, EmbeddingError, RerankerError: retrieval failed.
        """
        query, top_k, offset, filter_ = self.check_arguments(arguments)
        settings: dict[str, Any] = {}
        if self.search_mode is not None:
            settings["search_mode"] = self.search_mode
        if top_k is not None or self.top_k is not None:
            settings["top_k"] = top_k if top_k is not None else self.top_k
        if self.group_by is not None:
            settings["group_by"] = self.group_by
        settings.update(self.thresholds)
        docs = await self.knowledge_base.search(
            query, filter=filter_, scope=dict(self.scope) or None, offset=offset, **settings
        )
        grouped = self.group_by is not None
        return [_result(doc, grouped=grouped) for doc in docs]


def _result(doc: Document, *, grouped: bool = False) -> dict[str, Any]:
    title = doc.metadata.get(TITLE)
    uri = doc.metadata.get(SOURCE_URI)
    result = {
        "id": doc.id,
        "content": doc.content,
        "title": title if isinstance(title, str) else None,
        "source_uri": uri if isinstance(uri, str) else None,
        "headings": _headings(doc),
        "score": _finite(doc.score),
        "rank": doc.rank,
    }
    if grouped:
        result["more"] = [
            {"id": c.id, "content": c.content, "headings": _headings(c), "score": _finite(c.score)}
            for c in doc.group_chunks
        ]
    return result


def _finite(score: float | None) -> float | None:
    return score if score is not None and math.isfinite(score) else None


def _headings(doc: Document) -> list[str] | None:
    headings = doc.metadata.get(HEADINGS)
    if not isinstance(headings, list | tuple) or not all(isinstance(h, str) for h in headings):
        return None
    return list(headings)
