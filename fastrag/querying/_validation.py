"""The argument checks :class:`~fastrag.querying.QueryEngine`, :class:`~fastrag.querying.SubQuestionEngine`,
:func:`~fastrag.querying.build_prompt` and :func:`~fastrag.querying.split_question` share.

The module is private to :mod:`fastrag.querying`; its names are public so that the engines import them as
shared checks rather than as another module's private names. Each raises
:class:`~fastrag.errors.InvalidParameterError` naming the bad value (:func:`fastrag.providers.http.shown`).
"""

from __future__ import annotations

import math
from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.protocols import LLM, Retriever
from fastrag.providers.http import shown


def check_question(question: Any) -> None:
    """Refuse a ``question`` that is not a non-blank ``str`` encodable as UTF-8 (a lone surrogate is not).

    Raises:
        InvalidParameterError: not a str, blank, or not valid Unicode (naming the position).
    """
    if not isinstance(question, str) or not question.strip():
        raise InvalidParameterError(f"the question must be a non-empty string, got {shown(question)}")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(f"the question is not valid Unicode: {exc.reason} at position {exc.start}") from exc


def check_positive_int(name: str, value: Any) -> None:
    """Refuse a ``value`` that is not an ``int`` >= 1 (``bool`` is not an int here); ``name`` names it.

    Raises:
        InvalidParameterError: "``name`` must be a positive int, got ...".
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidParameterError(f"{name} must be a positive int, got {shown(value)}")


def check_sampling(temperature: Any, max_tokens: Any) -> None:
    """Check the engines' ``temperature`` (None or a finite number in [0, 2], the OpenAI range) and ``max_tokens``
    (None or an int >= 1).

    Raises:
        InvalidParameterError: either is out of its range or of the wrong type.
    """
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or (isinstance(temperature, float) and not math.isfinite(temperature))
        or not 0 <= temperature <= 2
    ):
        raise InvalidParameterError(f"temperature must be None or a number in [0, 2], got {shown(temperature)}")
    if max_tokens is not None:
        check_positive_int("max_tokens", max_tokens)


def check_engine_settings(
    retriever: Any,
    llm: Any,
    *,
    k: Any,
    max_context_chars: Any,
    system_prompt: Any,
    temperature: Any,
    max_tokens: Any,
) -> None:
    """Check the settings :class:`~fastrag.querying.QueryEngine` and :class:`~fastrag.querying.SubQuestionEngine` share
    (``llm`` may be ``None``: the caller decides whether it needs one).

    Raises:
        InvalidParameterError: a retriever without ``retrieve``, an llm without ``chat``, a ``k`` or
            ``max_context_chars`` that is not a positive int, a ``system_prompt`` that is not a non-empty str,
            or bad sampling arguments.
    """
    if not isinstance(retriever, Retriever):
        raise InvalidParameterError(f"retriever has no retrieve() method: {retriever!r}")
    if llm is not None and not isinstance(llm, LLM):
        raise InvalidParameterError(f"llm has no chat() method: {llm!r}")
    check_positive_int("k", k)
    check_positive_int("max_context_chars", max_context_chars)
    if system_prompt is not None and (not isinstance(system_prompt, str) or not system_prompt.strip()):
        raise InvalidParameterError(f"system_prompt must be None or a non-empty string, got {shown(system_prompt)}")
    check_sampling(temperature, max_tokens)
