"""A knowledge base as a function-calling tool: a JSON Schema for the model, an async callable for you.

::

    tool = kb.as_tool(user_id="alice")
    tools = [tool.openai()]            # {"type": "function", "function": {"name", "description", "parameters"}}
    tools = [tool.anthropic()]         # {"name", "description", "input_schema"}
    # ... the model answers with a tool call whose arguments are a JSON string:
    results = await tool(call.function.arguments)   # [{"id", "content", "title", "source_uri", "score", "rank"}]

The schema (:attr:`KnowledgeBaseTool.parameters`) is a JSON Schema object valid under Draft 7 and Draft
2020-12: ``query`` (a string with a non-space character, required), ``top_k`` (an integer in
``[1, max_top_k]``) and ``filter`` (a fastrag filter in its JSON form, see :mod:`fastrag.filters`; when the
knowledge base declares fields, ``key`` is restricted to them), with ``additionalProperties: false``. The
callable checks the same rules itself (and the field types), so arguments that pass it are exactly those
the schema accepts, less filters whose value types do not fit the declared fields.
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
)
from fastrag.models import SOURCE_URI, TITLE, Document
from fastrag.retrieval.limits import MAX_K, MAX_QUERY_CHARS

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.knowledge_base import KnowledgeBase

__all__ = ["TOOL_NAME_PATTERN", "KnowledgeBaseTool"]

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
"""Tool names OpenAI and Anthropic both accept."""

_ARGUMENTS = ("query", "top_k", "filter")


def _filter_schema(keys: list[str] | None) -> dict[str, Any]:
    """``$defs`` for the filter JSON form; ``keys`` restricts comparison keys (``None``: any string)."""
    key: dict[str, Any] = {"type": "string", "minLength": 1}
    if keys is not None:
        key = {"type": "string", "enum": keys}
    scalar = {"type": ["string", "number", "boolean"]}

    def comparison(value: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"key": key, "value": value},
            "required": ["key", "value"],
            "additionalProperties": False,
        }

    operators: dict[str, Any] = {}
    for op in COMPARISON_OPERATORS:
        if op in EQUALITY_OPERATORS or op in LIST_OPERATORS:
            operators[op] = comparison(scalar)
        elif op in SET_OPERATORS:
            operators[op] = comparison({"type": "array", "items": scalar})
        elif op in RANGE_OPERATORS:
            operators[op] = comparison({"type": ["number", "string"], "description": "a number or an ISO-8601 date"})
        elif op in STRING_OPERATORS:
            operators[op] = comparison({"type": "string"})
    children = {"type": "array", "items": {"$ref": "#/$defs/filter"}, "minItems": 1}
    operators["andAll"] = children
    operators["orAll"] = children
    operators["notAll"] = {"anyOf": [children, {"$ref": "#/$defs/filter"}]}
    return {
        "filter": {
            "type": "object",
            "description": "exactly one operator",
            "properties": operators,
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
        }
    }


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
        scope: the tenant every call is confined to (``{}``: none); not visible to the model.
    """

    name: str
    description: str
    search_mode: str | None
    top_k: int | None
    max_top_k: int
    scope: Mapping[str, str | int]
    knowledge_base: KnowledgeBase = field(repr=False, compare=False)
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
        max_top_k: int = 50,
        scope: Mapping[str, str | int] | None = None,
    ) -> KnowledgeBaseTool:
        """The tool for ``knowledge_base`` (what :meth:`~fastrag.knowledge_base.KnowledgeBase.as_tool` returns).

        Raises:
            InvalidParameterError: ``name`` does not match :data:`TOOL_NAME_PATTERN`; ``description`` is not a
                non-empty string; an unknown ``search_mode``; ``max_top_k`` not an int in [1, 10,000]; ``top_k``
                not an int in [1, ``max_top_k``].
        """
        from fastrag.knowledge_base import SearchSettings

        if not isinstance(name, str) or not re.match(TOOL_NAME_PATTERN, name):
            raise InvalidParameterError(f"tool name must match {TOOL_NAME_PATTERN}, got {name!r}")
        if description is not None and (not isinstance(description, str) or not description.strip()):
            raise InvalidParameterError(f"description must be a non-empty string, got {description!r}")
        SearchSettings(search_mode=search_mode)  # validates the mode
        if isinstance(max_top_k, bool) or not isinstance(max_top_k, int) or not 1 <= max_top_k <= MAX_K:
            raise InvalidParameterError(f"max_top_k must be an int in [1, {MAX_K}], got {max_top_k!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= max_top_k):
            raise InvalidParameterError(f"top_k must be None or an int in [1, max_top_k={max_top_k}], got {top_k!r}")
        declared = knowledge_base.fields
        keys = None if declared is None else sorted(declared)
        if description is None:
            description = (
                "Search the knowledge base for passages relevant to a question. Returns the best passages first, "
                "each with id, content, title, source_uri, score (higher is more relevant) and rank (0 is best)."
            )
            if declared is not None:
                listed = ", ".join(f"{k} ({'string or integer' if t == 'tenant' else t})" for k, t in sorted(declared.items()))
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
                    "type": "integer",
                    "minimum": 1,
                    "maximum": max_top_k,
                    "description": "How many passages to return.",
                },
                "filter": {
                    "$ref": "#/$defs/filter",
                    "description": (
                        'Optional metadata filter, one operator per object, e.g. {"equals": {"key": "category", '
                        '"value": "news"}} or {"andAll": [...]}. Operators: '
                        + ", ".join((*COMPARISON_OPERATORS, "andAll", "orAll", "notAll"))
                        + "."
                    ),
                },
            },
            "required": ["query"],
            "additionalProperties": False,
            "$defs": _filter_schema(keys),
        }
        return cls(
            name=name,
            description=description,
            search_mode=search_mode,
            top_k=top_k,
            max_top_k=max_top_k,
            scope=dict(scope or {}),
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

    def check_arguments(self, arguments: Mapping[str, Any] | str) -> tuple[str, int | None, Any]:
        """Validate a call's arguments; return ``(query, top_k, filter)``.

        Raises:
            InvalidParameterError: not a JSON object (or a string of one); ``query`` missing, not a string,
                blank or too long; ``top_k`` not an integer in ``[1, max_top_k]``.
            UnknownParameterError: an argument other than ``query``, ``top_k``, ``filter``.
            FilterError: ``filter`` is not an object, is malformed, or does not fit the declared fields.
        """
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
        filter_ = arguments.get("filter")
        if filter_ is not None:
            if not isinstance(filter_, Mapping):
                raise FilterError(f"filter must be a JSON object, got {type(filter_).__name__}")
            filter_ = self.knowledge_base._filter(filter_)
        return query, top_k, filter_

    async def __call__(self, arguments: Mapping[str, Any] | str) -> list[dict[str, Any]]:
        """Run the search the model asked for.

        Args:
            arguments: the call's arguments, as a mapping or the JSON string a model sends.

        Returns:
            A JSON-serialisable list, best first, of ``{"id", "content", "title", "source_uri", "score",
            "rank"}`` (``title``/``source_uri`` ``None`` when unknown; ``score`` a finite float, higher is
            better, or ``None``; ``rank`` zero-based).

        Raises:
            InvalidParameterError, UnknownParameterError, FilterError: bad arguments (see
                :meth:`check_arguments`); send ``str(error)`` back to the model so it can correct the call.
            BackendError, EmbeddingError, RerankerError: retrieval failed.
        """
        query, top_k, filter_ = self.check_arguments(arguments)
        settings: dict[str, Any] = {}
        if self.search_mode is not None:
            settings["search_mode"] = self.search_mode
        if top_k is not None or self.top_k is not None:
            settings["top_k"] = top_k if top_k is not None else self.top_k
        docs = await self.knowledge_base.search(query, filter=filter_, scope=dict(self.scope) or None, **settings)
        return [_result(doc) for doc in docs]


def _result(doc: Document) -> dict[str, Any]:
    score = doc.score
    if score is not None and not math.isfinite(score):
        score = None
    title = doc.metadata.get(TITLE)
    uri = doc.metadata.get(SOURCE_URI)
    return {
        "id": doc.id,
        "content": doc.content,
        "title": title if isinstance(title, str) else None,
        "source_uri": uri if isinstance(uri, str) else None,
        "score": score,
        "rank": doc.rank,
    }

