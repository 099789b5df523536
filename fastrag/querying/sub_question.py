"""Multi-hop questions: split a question into sub-questions, retrieve for each concurrently, merge.

::

    engine = SubQuestionEngine(retriever=retriever, k=5)     # no LLM: the deterministic splitter
    result = await engine.retrieve("How does parental leave differ between Germany and France?")
    result.sub_questions   # ('How does parental leave work in Germany?', 'How does parental leave work in France?')
    for doc in result.documents:
        print(doc.id, doc.metadata["sub_questions"])        # which sub-question(s) found it

Splitting:

- **With an LLM** (``llm=``), the model is asked for a JSON array of self-contained sub-questions; the
  reply is validated (a JSON array of 1 or more non-empty strings; a ```` ```json ```` fence or an object
  ``{"sub_questions": [...]}`` is accepted; repeats are dropped; at most ``max_sub_questions`` are kept,
  the first ones; each must pass the retriever's own query checks,
  :func:`~fastrag.retrieval._validation.check_query` under the retriever's ``limits`` (default
  :data:`~fastrag.retrieval.limits.DEFAULT_LIMITS`): not blank, valid Unicode, at most ``max_query_chars``
  characters). A reply that does not pass (JSON nested too deeply for Python's parser included), or a
  failing LLM, raises
  :class:`~fastrag.errors.BackendError` unless ``fallback="deterministic"``: then the deterministic
  splitter is used, the result says so (``splitter == "deterministic_fallback"``, ``split_error``), and a
  WARNING is logged (logger ``fastrag.querying``). Never silently.
- **Without an LLM**, :func:`split_question`, a pure function for English questions: comparisons ("How
  does X differ between A and B?", "How do A and B differ in X?", "How does A differ from B?", "What is
  the difference [in X] between A and B?", "Compare A and B [in X]", "A vs B [for X]") become one question
  per compared item, and a conjunction of questions ("What is A and
  how does B work?", "What is A? What is B?") becomes its questions. A question with nothing to split is
  its own only sub-question.

Merging: the sub-questions' lists are fused with Reciprocal Rank Fusion (Cormack, Clarke & Büttcher, SIGIR
2009; ``rank_constant=60``), one branch per sub-question, so the best document of each sub-question comes
before the second-best of any, and a document found for several sub-questions ranks higher. Documents are
deduplicated by id; each is a copy stamped with the fused ``score`` (higher is better), ``rank``,
``metadata["branches"]`` (its score and rank for each sub-question that found it) and
``metadata["sub_questions"]`` (:data:`~fastrag.querying.engine.SUB_QUESTIONS`: the sub-questions that found
it, in the order they were asked). The retrieved documents are never mutated.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import anyio

from fastrag.errors import BackendError, ConfigurationError, InvalidParameterError
from fastrag.filters import FilterLike
from fastrag.llm import ChatMessage
from fastrag.models import Document
from fastrag.protocols import LLM, Retriever
from fastrag.providers.http import shown
from fastrag.querying._validation import check_engine_settings, check_positive_int, check_question
from fastrag.querying.engine import DEFAULT_MAX_CONTEXT_CHARS, SUB_QUESTIONS, Answer, QueryEngine, retrieve_with_status
from fastrag.retrieval._validation import check_query
from fastrag.retrieval.fusion import ReciprocalRankFusion
from fastrag.retrieval.limits import DEFAULT_LIMITS, RetrievalLimits
from fastrag.retrieval.result import RetrievalResult

__all__ = ["SUB_QUESTIONS", "Splitter", "SubQuestionEngine", "SubQuestionResult", "split_question"]

logger = logging.getLogger("fastrag.querying")

Splitter = Literal["llm", "deterministic", "deterministic_fallback"]
"""Who split the question: the LLM; :func:`split_question` (no LLM given); or :func:`split_question`
because the LLM failed and ``fallback="deterministic"`` was chosen."""

# --------------------------------------------------------------------------------- deterministic splitter

_FLAGS = re.IGNORECASE
_ASPECT_MARKER = r"(?:in terms of|with respect to|with regard to|when it comes to|regarding|for|on|in)"
_ITEM_SEPARATOR = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+", _FLAGS)
_COMPARE_SEPARATOR = re.compile(r"\s*,\s*(?:and\s+)?|\s+(?:and|with|to|against|versus|vs\.?)\s+", _FLAGS)
_VERSUS = re.compile(r"\s+(?:vs\.?|versus)\s+", _FLAGS)

_DIFFER = re.compile(
    r"^how\s+(?P<aux>does|do|did)\s+(?P<x>.+?)\s+(?:differ|vary|compare)\s+(?P<marker>between|among|across|in|for)\s+(?P<items>.+)$",
    _FLAGS,
)
# "How do A and B differ [in X]?", subject first: the compared items before the verb (a plural verb: with
# "does" the subject is one thing, the aspect, as in "How does X differ in A and B")
_ITEMS_DIFFER = re.compile(
    r"^how\s+(?:do|did)\s+(?P<items>.+?)\s+(?:differ|vary|compare)"
    r"(?:\s+(?:from|with|to)\s+(?:each\s+other|one\s+another))?"
    rf"(?:\s+{_ASPECT_MARKER}\s+(?P<x>.+))?$",
    _FLAGS,
)
# "How does A differ from B [in X]?", "How does A compare to B?", "How is A different from B?"
_DIFFER_FROM = re.compile(
    r"^how\s+(?:do|does|did|is|are|was|were)\s+(?P<first>.+?)\s+"
    r"(?:differ\s+from|different\s+from|compare\s+(?:to|with))\s+(?P<items>.+?)"
    rf"(?:\s+{_ASPECT_MARKER}\s+(?P<x>.+))?$",
    _FLAGS,
)
_POSSESSIVE = re.compile(r"^(?:their|its|the\s+respective)\s+", _FLAGS)
_DIFFERENT = re.compile(
    r"^how\s+(?P<aux>is|are|was|were)\s+(?P<x>.+?)\s+different\s+(?:between|among|across|in|for)\s+(?P<items>.+)$",
    _FLAGS,
)
_DIFFERENCE = re.compile(
    r"(?:^|\b)differences?\s+(?:in\s+(?P<x1>.+?)\s+)?between\s+(?P<items>.+?)"
    rf"(?:\s+{_ASPECT_MARKER}\s+(?P<x2>.+))?$",
    _FLAGS,
)
_COMPARE = re.compile(r"^compare\s+(?P<rest>.+)$", _FLAGS)
_COMPARE_ACROSS = re.compile(r"^(?P<x>.+?)\s+(?:between|across|among)\s+(?P<items>.+)$", _FLAGS)
_WITH_ASPECT = re.compile(rf"^(?P<items>.+?)\s+{_ASPECT_MARKER}\s+(?P<x>.+)$", _FLAGS)
_WH = r"(?:what|how|why|when|where|which|who|whom|whose)"
_AUX = r"(?:is|are|was|were|does|do|did|can|could|should|would|will|has|have)"
# where one question ends and the next begins: after "?" any question word; after "and", ";" or "," a wh-word
_QUESTION_BREAK = re.compile(rf"\?\s*(?=(?:{_WH}|{_AUX})\b)|\s*[;,]\s*(?:and\s+)?(?={_WH}\b)|\s+and\s+(?={_WH}\b)", _FLAGS)
_QUESTION_START = re.compile(rf"^(?:{_WH}|{_AUX})\b", _FLAGS)


def split_question(question: str, *, max_sub_questions: int = 5) -> tuple[str, ...]:
    """Split an English ``question`` into sub-questions by its wording (no model; pure and deterministic).

    - "How does X differ between A and B?" -> "How does X work in A?", "How does X work in B?"
    - "How do A and B differ in X?" (the items first; also "on", "regarding", "in terms of", ...) ->
      "What is X in A?", "What is X in B?"; without "in X": "What is A?", "What is B?". With "do", the
      items are read before the verb ("How do pay and leave differ in A and B?" is read this way too);
      with "does", after it.
    - "How does A differ from B [in X]?" (also "compare to/with", "is A different from B") -> as above
    - "How is X different in A and B?" -> "What is X like in A?", "What is X like in B?"
    - "What is the difference in X between A and B?" -> "What is X in A?", "What is X in B?"
    - "What is the difference between A and B?" -> "What is A?", "What is B?"; with "... in X" at the
      end: "What is X in A?", "What is X in B?"
    - "Compare A and B" (also "with", "to", "vs") -> "What is A?", "What is B?"; "Compare A and B in X" and
      "Compare X between A and B" -> "What is X in A?", "What is X in B?"
    - "A vs B" (also "versus") -> "What is A?", "What is B?"; "A vs B for X" -> "What is X in A?", ...
    - "What is A and how does B work?", "What is A? How does B work?" -> "What is A?", "How does B work?"

    Lists of items ("A, B and C") give one sub-question per item. Anything else, and any match that yields
    fewer than two distinct sub-questions, gives ``(question,)`` (stripped). An item whose name contains
    "and" ("research and development") is split too: this is wording, not understanding.

    Args:
        question: the question, a non-empty string.
        max_sub_questions: the most sub-questions to return (an int >= 1); the first ones are kept.

    Returns:
        The sub-questions, each ending with ``"?"``, in the order the question names them.

    Raises:
        InvalidParameterError: ``question`` is empty or not a string, or ``max_sub_questions`` is not a
            positive int.

    Examples:
        >>> split_question("How does parental leave differ between Germany and France?")
        ('How does parental leave work in Germany?', 'How does parental leave work in France?')
        >>> split_question("What is BM25?")
        ('What is BM25?',)
    """
    check_question(question)
    check_positive_int("max_sub_questions", max_sub_questions)
    text = " ".join(question.split())
    core = text.rstrip(" ?.!")
    for rule in (_split_differ, _split_difference, _split_compare, _split_versus, _split_conjunction):
        parts = rule(core if rule is not _split_conjunction else text)
        if parts is None:
            continue
        distinct = list(dict.fromkeys(_as_question(p) for p in parts if p.strip(" ?.,;")))
        unique: dict[str, str] = {}
        for part in distinct:
            unique.setdefault(part.casefold(), part)
        if len(unique) >= 2:
            return tuple(unique.values())[:max_sub_questions]
    return (question.strip(),)


def _as_question(text: str) -> str:
    text = text.strip().rstrip(" ?.,;!")
    return text[:1].upper() + text[1:] + "?"


def _items(text: str, separator: re.Pattern[str] = _ITEM_SEPARATOR) -> list[str] | None:
    items = [i.strip(" ,.;?") for i in separator.split(text)]
    items = [i for i in items if i]
    return items if len(items) >= 2 else None


def _about(items: list[str], aspect: str | None) -> list[str]:
    if aspect:
        return [f"What is {aspect} in {item}" for item in items]
    return [f"What is {item}" for item in items]


def _split_differ(core: str) -> list[str] | None:
    match = _DIFFER.match(core)
    if match and match["marker"].lower() in ("between", "among", "across"):  # the items follow the marker
        items = _items(match["items"])
        if items:
            return [f"How {match['aux'].lower()} {match['x']} work in {item}" for item in items]
    # "How does X differ in A and B" and "How do A and B differ in X" read alike: the side of the verb
    # that lists two or more items holds the items, the subject side first
    subject_first = _ITEMS_DIFFER.match(core)
    if subject_first:
        items = _items(subject_first["items"])
        if items:
            return _about(items, _aspect(subject_first["x"]))
    if match:
        items = _items(match["items"])
        if items:
            return [f"How {match['aux'].lower()} {match['x']} work in {item}" for item in items]
    differ_from = _DIFFER_FROM.match(core)
    if differ_from:
        items = [differ_from["first"].strip(), *(_items(differ_from["items"]) or [differ_from["items"].strip()])]
        return _about(items, _aspect(differ_from["x"]))
    match = _DIFFERENT.match(core)
    if match:
        items = _items(match["items"])
        if items:
            aux = match["aux"].lower()
            return [f"What {aux} {match['x']} like in {item}" for item in items]
    return None


def _aspect(text: str | None) -> str | None:
    """The compared aspect without a leading possessive: "their filtering" -> "filtering"."""
    return _POSSESSIVE.sub("", text.strip()) if text else None


def _split_difference(core: str) -> list[str] | None:
    match = _DIFFERENCE.search(core)
    if not match:
        return None
    items = _items(match["items"])
    if not items:
        return None
    return _about(items, match["x1"] or match["x2"])


def _split_compare(core: str) -> list[str] | None:
    match = _COMPARE.match(core)
    if not match:
        return None
    rest = match["rest"]
    across = _COMPARE_ACROSS.match(rest)
    if across:
        items = _items(across["items"])
        if items:
            return _about(items, across["x"])
    with_aspect = _WITH_ASPECT.match(rest)
    if with_aspect:
        items = _items(with_aspect["items"], _COMPARE_SEPARATOR)
        if items:
            return _about(items, with_aspect["x"])
    items = _items(rest, _COMPARE_SEPARATOR)
    return _about(items, None) if items else None


def _split_versus(core: str) -> list[str] | None:
    if not _VERSUS.search(core):
        return None
    head = core.rsplit(":", 1)[-1]  # "Which is faster: A vs B" -> "A vs B"
    items = [i.strip() for i in _VERSUS.split(head)]
    aspect = None
    last = _WITH_ASPECT.match(items[-1])
    if last:
        items[-1], aspect = last["items"], last["x"]
    items = [i for i in items if i]
    return _about(items, aspect) if len(items) >= 2 else None


def _split_conjunction(text: str) -> list[str] | None:
    parts = [p.strip() for p in _QUESTION_BREAK.split(text)]
    parts = [p for p in parts if p.strip(" ?.,;")]
    if len(parts) < 2 or not all(_QUESTION_START.match(p) or i == 0 for i, p in enumerate(parts)):
        return None
    if any(len(p.rstrip(" ?.,;").split()) < 2 for p in parts):
        return None
    return parts


# ---------------------------------------------------------------------------------------- the engine


@dataclass(frozen=True, slots=True)
class SubQuestionResult:
    """What :meth:`SubQuestionEngine.retrieve` found.

    Attributes:
        question: the question asked.
        sub_questions: the sub-questions retrieved for, in order (the question itself when it was not
            split).
        documents: the merged documents, best first (see the module docstring), each tagged with
            ``metadata["sub_questions"]``; from the sub-questions whose retrieval succeeded.
        per_question: ``{sub_question: RetrievalResult}``, one per sub-question, in order.
        splitter: who split the question (:data:`Splitter`).
        split_error: why the LLM's split was not used, when ``splitter == "deterministic_fallback"``.
    """

    question: str
    sub_questions: tuple[str, ...]
    documents: tuple[Document, ...]
    per_question: Mapping[str, RetrievalResult]
    splitter: Splitter
    split_error: Exception | None = None
    _combined: RetrievalResult = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sub_questions", tuple(self.sub_questions))
        object.__setattr__(self, "documents", tuple(self.documents))
        object.__setattr__(self, "per_question", MappingProxyType(dict(self.per_question)))
        object.__setattr__(self, "_combined", _combine(self.documents, self.per_question))

    @property
    def retrieval(self) -> RetrievalResult:
        """All the sub-questions' retrievals as one :class:`~fastrag.retrieval.result.RetrievalResult`.

        ``documents`` are the merged documents; ``failed_branches`` names each failed sub-question (and
        ``"<sub-question>/<branch>"`` for a branch a sub-question's retrieval lost); ``error`` is set only
        when every sub-question failed (the first one's error); ``partial`` is ``True`` when some
        sub-questions failed or were partial; ``timings`` holds each sub-question's ``"total"``.
        """
        return self._combined

    @property
    def retrieval_failed(self) -> bool:
        """``True`` when the retrieval of every sub-question failed."""
        return self._combined.retrieval_failed

    @property
    def partial(self) -> bool:
        """``True`` when the documents miss what a failed (or partial) sub-question retrieval would have found."""
        return self._combined.partial

    @property
    def failed_sub_questions(self) -> tuple[str, ...]:
        """The sub-questions whose retrieval failed, in order."""
        return tuple(q for q, r in self.per_question.items() if r.retrieval_failed)


def _combine(documents: Sequence[Document], per_question: Mapping[str, RetrievalResult]) -> RetrievalResult:
    failed: dict[str, Exception] = {}
    timings: dict[str, float] = {}
    for question, result in per_question.items():
        if result.error is not None:
            failed[question] = result.error
        for branch, error in result.failed_branches.items():
            failed.setdefault(f"{question}/{branch}", error)
        if "total" in result.timings:
            timings[question] = result.timings["total"]
    errors = [r.error for r in per_question.values() if r.error is not None]
    if per_question and len(errors) == len(per_question):
        return RetrievalResult(error=errors[0], failed_branches=failed, timings=timings)
    partial = bool(errors) or any(r.partial for r in per_question.values())
    return RetrievalResult(documents=tuple(documents), failed_branches=failed, partial=partial, timings=timings)


_SPLIT_PROMPT = (
    "You split a user's question into simpler sub-questions for a search engine. Each sub-question must "
    "make sense on its own: repeat the subject instead of using pronouns. For a comparison, ask one question "
    "per thing compared. Use at most {n} sub-questions. If the question needs no splitting, answer with a "
    "one-element array holding the question. Answer with a JSON array of strings and nothing else."
)


class SubQuestionEngine:
    """Retrieve for each part of a multi-part question, concurrently, and merge what was found.

    Args:
        retriever: any :class:`~fastrag.protocols.Retriever` (its ``retrieve_result`` is used when it has
            one, so a failed sub-question is reported in its :class:`~fastrag.retrieval.result.RetrievalResult`).
        llm: an :class:`~fastrag.protocols.LLM` to split questions (and for :meth:`query`); ``None`` uses
            :func:`split_question`.
        k: how many documents to retrieve per sub-question (an int >= 1).
        max_sub_questions: the most sub-questions to retrieve for (an int >= 1).
        fallback: what to do when the LLM's split fails: ``"error"`` raises; ``"deterministic"`` uses
            :func:`split_question`, marks the result and logs a WARNING.
        system_prompt: the instructions for :meth:`query`'s answer (``None``: the
            :class:`~fastrag.querying.engine.QueryEngine` default).
        max_context_chars: the budget of the sources section in :meth:`query`'s prompt (headers and
            content), in characters (see :func:`~fastrag.querying.engine.build_prompt`).
        temperature: passed to ``llm.chat`` (splitting and answering), a number in [0, 2]; ``None`` leaves
            the model's default.
        max_tokens: passed to ``llm.chat`` when answering, an int >= 1; ``None`` leaves the model's default.

    Raises:
        InvalidParameterError: ``retriever`` has no ``retrieve``; ``llm`` has no ``chat``; ``k``,
            ``max_sub_questions`` or ``max_context_chars`` is not a positive int; ``fallback`` is neither
            ``"error"`` nor ``"deterministic"``; ``system_prompt`` is blank; ``temperature`` is not a
            number in [0, 2]; ``max_tokens`` is not a positive int.
    """

    def __init__(
        self,
        *,
        retriever: Retriever,
        llm: LLM | None = None,
        k: int = 5,
        max_sub_questions: int = 5,
        fallback: Literal["error", "deterministic"] = "error",
        system_prompt: str | None = None,
        max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        check_engine_settings(retriever, llm, k=k, max_context_chars=max_context_chars, system_prompt=system_prompt,
                             temperature=temperature, max_tokens=max_tokens)
        check_positive_int("max_sub_questions", max_sub_questions)
        if fallback not in ("error", "deterministic"):
            raise InvalidParameterError(f"fallback must be 'error' or 'deterministic', got {shown(fallback)}")
        self.retriever = retriever
        self.llm = llm
        self.k = k
        self.max_sub_questions = max_sub_questions
        self.fallback = fallback
        self.system_prompt = system_prompt
        self.max_context_chars = max_context_chars
        self.temperature = temperature
        self.max_tokens = max_tokens

    async def sub_questions(self, question: str) -> tuple[tuple[str, ...], Splitter, Exception | None]:
        """Split ``question``: ``(sub_questions, splitter, split_error)`` (see :class:`SubQuestionResult`).

        Raises:
            InvalidParameterError: the question is empty, not a string, or not valid Unicode.
            BackendError: the LLM failed, or its reply is not a valid list (not JSON, nested too deeply,
                not an array of strings, or a sub-question the retriever would refuse: blank, not valid
                Unicode, longer than its ``limits.max_query_chars``), and ``fallback == "error"`` (the
                LLM's own errors, such as :class:`~fastrag.errors.AuthenticationError`, as it raises
                them).
        """
        check_question(question)
        if self.llm is None:
            return split_question(question, max_sub_questions=self.max_sub_questions), "deterministic", None
        try:
            return await self._llm_split(question), "llm", None
        except BackendError as exc:
            if self.fallback != "deterministic":
                raise
            logger.warning("the LLM could not split the question, using the deterministic splitter: %s", exc)
            return split_question(question, max_sub_questions=self.max_sub_questions), "deterministic_fallback", exc

    async def _llm_split(self, question: str) -> tuple[str, ...]:
        messages = (
            ChatMessage("system", _SPLIT_PROMPT.format(n=self.max_sub_questions)),
            ChatMessage("user", question.strip()),
        )
        reply = await self.llm.chat(messages, temperature=self.temperature)  # type: ignore[union-attr]
        limits = getattr(self.retriever, "limits", None)
        return _parse_sub_questions(
            reply, self.max_sub_questions, limits if isinstance(limits, RetrievalLimits) else DEFAULT_LIMITS
        )

    async def retrieve(self, question: str, *, filter: FilterLike | None = None) -> SubQuestionResult:  # noqa: A002
        """Split ``question``, retrieve ``k`` documents for each sub-question concurrently, and merge them.

        Args:
            question: the question, a non-empty string.
            filter: a filter applied to every sub-question's retrieval.

        Returns:
            A :class:`SubQuestionResult`. A sub-question whose retrieval failed is reported in
            ``per_question`` (and makes the result ``partial``), never mistaken for "no match".

        Raises:
            InvalidParameterError: the question is empty or not valid Unicode, or a sub-question of the
                deterministic splitter is refused by the retriever (one the LLM wrote is checked first, and
                refusing it is a failed split: ``BackendError`` or the fallback).
            FilterError: the filter is malformed or cannot be expressed by the backend.
            BackendError: splitting with the LLM failed and ``fallback == "error"``.
        """
        sub_questions, splitter, split_error = await self.sub_questions(question)
        results: dict[str, RetrievalResult] = {}

        async def run(sub_question: str) -> None:
            results[sub_question] = await retrieve_with_status(self.retriever, sub_question, k=self.k, filter=filter)

        try:
            async with anyio.create_task_group() as tg:
                for sub_question in sub_questions:
                    tg.start_soon(run, sub_question)
        except BaseExceptionGroup as group:  # a bad argument in one task: raise it, not a group
            first = next((e for e in group.exceptions if isinstance(e, Exception)), None)
            if first is None or any(not isinstance(e, Exception) for e in group.exceptions):
                raise
            raise first from None
        per_question = {q: results[q] for q in sub_questions}
        return SubQuestionResult(
            question=question,
            sub_questions=sub_questions,
            documents=_merge(per_question),
            per_question=per_question,
            splitter=splitter,
            split_error=split_error,
        )

    async def query(self, question: str, *, filter: FilterLike | None = None) -> Answer:  # noqa: A002
        """Retrieve as :meth:`retrieve` does, then answer with the LLM from the merged documents.

        The prompt is :class:`~fastrag.querying.engine.QueryEngine`'s; each source also shows the
        sub-questions it answers. ``answer.retrieval`` is :attr:`SubQuestionResult.retrieval`: the answer
        says retrieval failed when every sub-question failed, and is ``partial`` when some did.

        Raises:
            ConfigurationError: the engine has no LLM.
            InvalidParameterError, FilterError, BackendError: as :meth:`retrieve` and
                :meth:`~fastrag.querying.engine.QueryEngine.answer` raise them.
        """
        if self.llm is None:
            raise ConfigurationError("SubQuestionEngine.query needs an LLM: pass llm= when building the engine")
        result = await self.retrieve(question, filter=filter)
        engine = QueryEngine(
            retriever=self.retriever,
            llm=self.llm,
            k=self.k,
            system_prompt=self.system_prompt,
            max_context_chars=self.max_context_chars,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        return await engine.answer(question, result.retrieval)

    def __repr__(self) -> str:
        return f"SubQuestionEngine(retriever={self.retriever!r}, llm={self.llm!r}, k={self.k})"


def _merge(per_question: Mapping[str, RetrievalResult]) -> tuple[Document, ...]:
    lists = {q: list(r.documents) for q, r in per_question.items() if not r.retrieval_failed}
    if not any(lists.values()):
        return ()
    found = {q: {d.id for d in docs} for q, docs in lists.items()}
    fused = ReciprocalRankFusion().fuse(lists)
    return tuple(d.with_metadata(**{SUB_QUESTIONS: [q for q in per_question if d.id in found.get(q, ())]}) for d in fused)


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


def _parse_sub_questions(reply: Any, limit: int, limits: RetrievalLimits = DEFAULT_LIMITS) -> tuple[str, ...]:
    """The validated sub-questions of an LLM reply; :class:`BackendError` when it is not a usable list.

    Each sub-question passes :func:`~fastrag.retrieval._validation.check_query` under ``limits`` (what the
    retrievers check), so a reply the retriever would refuse is the LLM's failure, not the caller's.
    """
    if not isinstance(reply, str):
        raise BackendError(f"the LLM returned {type(reply).__name__}, not text")
    snippet = reply if len(reply) <= 200 else reply[:200] + "..."
    text = _FENCE.sub("", reply.strip()).strip()
    try:
        value = json.loads(text)
    # JSONDecodeError is a ValueError, as is an integer of over 4,300 digits; RecursionError: nested too deeply
    except (ValueError, RecursionError):
        start, end = text.find("["), text.rfind("]")
        try:
            value = json.loads(text[start : end + 1]) if 0 <= start < end else None
        except (ValueError, RecursionError) as exc:
            if isinstance(exc, RecursionError):
                raise BackendError(f"the LLM's sub-questions are JSON nested too deeply to parse: {snippet!r}") from exc
            value = None
    if isinstance(value, Mapping):
        value = value.get("sub_questions", value.get("questions"))
    if not isinstance(value, list) or not value or not all(isinstance(q, str) and q.strip() for q in value):
        raise BackendError(f"the LLM's sub-questions are not a JSON array of non-empty strings: {snippet!r}")
    questions: dict[str, str] = {}
    for q in value:
        q = " ".join(q.split())
        try:
            check_query(q, limits)
        except InvalidParameterError as exc:
            raise BackendError(f"the LLM wrote a sub-question the retriever would refuse: {exc}") from exc
        questions.setdefault(q.casefold(), q)
    return tuple(questions.values())[:limit]
