"""Answer a question from retrieved documents with an LLM, citing them: :class:`QueryEngine`.

::

    from fastrag.llm import OpenAICompatibleLLM
    from fastrag.querying import QueryEngine

    async with OpenAICompatibleLLM(base_url="http://localhost:8000/v1", model="my-model") as llm:
        engine = QueryEngine(retriever=retriever, llm=llm, k=5)
        answer = await engine.query("How are documents ranked?")
        print(answer.text)
        for citation in answer.citations:
            print(citation.number, citation.document.source_uri)

What the engine does, in order:

1. Retrieves with a status (:class:`~fastrag.retrieval.result.RetrievalResult`): the retriever's own
   ``retrieve_result`` when it has one, otherwise :func:`~fastrag.retrieval.result.retrieve_result`
   around its ``retrieve``. A failure is reported, never mistaken for "no match".
2. If retrieval **failed**, it does not call the LLM: the :class:`Answer` says so, naming the error, with
   ``grounded=False`` and ``status == "retrieval_failed"``. If **nothing matched**, it does not call the
   LLM either: the answer says no sources were found (``status == "no_sources"``).
3. Otherwise it builds a grounded prompt (:func:`build_prompt`): the documents numbered ``[1]..[n]`` (a
   document the retriever returned twice, by id, is numbered once) with their title, language,
   ``source_uri`` and section, within a character budget, and instructions to answer only from them, to
   cite with ``[n]``, and to say it does not know when they do not answer the question.
4. It parses the reply's ``[n]`` markers (:func:`parse_citations`) into :class:`Citation` objects that point
   at the numbered documents; numbers outside ``1..n`` are not citations and are reported in
   ``Answer.invalid_citations``.

A **partial** retrieval (a hybrid retriever that lost a branch) is answered from the documents that came
back, and marked: ``answer.partial`` is ``True`` and ``answer.retrieval.failed_branches`` names what failed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastrag.errors import BackendError, FilterError, InvalidParameterError
from fastrag.filters import FilterLike
from fastrag.llm import ChatMessage
from fastrag.providers.http import shown as _shown
from fastrag.models import HEADINGS, LANGUAGE, PAGE, SOURCE_URI, TITLE, Document
from fastrag.protocols import LLM, ReturnsResult, Retriever
from fastrag.querying._validation import check_engine_settings, check_positive_int, check_question
from fastrag.retrieval.result import RetrievalResult, retrieve_result

__all__ = [
    "DEFAULT_MAX_CONTEXT_CHARS",
    "DEFAULT_SYSTEM_PROMPT",
    "MAX_SOURCE_FIELD_CHARS",
    "SUB_QUESTIONS",
    "Answer",
    "AnswerStatus",
    "Citation",
    "Prompt",
    "QueryEngine",
    "build_prompt",
    "parse_citations",
    "retrieve_with_status",
]

SUB_QUESTIONS = "sub_questions"
"""Metadata key set by :class:`~fastrag.querying.sub_question.SubQuestionEngine`: the list of sub-questions
(``list[str]``, in the order they were asked) whose retrieval returned the document. :func:`build_prompt`
shows it as an ``answers:`` line of the source."""

DEFAULT_MAX_CONTEXT_CHARS = 12_000
"""Default budget for the sources section of one prompt (each source's header lines and content), in
characters: about 3,000 tokens of English at the usual 4 characters per token, leaving room in an
8k-token context window for instructions and answer."""

MAX_SOURCE_FIELD_CHARS = 300
"""The longest value of one header line of a source in the prompt (its title, language, ``source_uri``,
section path or sub-questions), in characters; a longer one is cut and ends with ``" …"``. Long enough for
any real title or URL, it keeps a document whose metadata is huge from filling the prompt with it."""

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions using only the numbered sources given with the question. "
    "Cite every statement you take from a source with its number in square brackets, like [1] or [1][3]. "
    "If the sources do not contain the answer, say that you do not know; do not answer from outside knowledge. "
    "Answer in the language of the question."
)
"""The system message :class:`QueryEngine` sends unless given another."""

AnswerStatus = Literal["answered", "retrieval_failed", "no_sources"]
"""How an :class:`Answer` came about: the LLM answered from sources; retrieval failed (no LLM call); or
retrieval succeeded with no documents (no LLM call)."""

_TRUNCATED = " …"
_NUMBER = r"\d+(?:\s*[-–]\s*\d+)?"
# [1], [1, 3], [1;3], [2-4], [Source 1], [sources: 1, 2]; the numbers are read by _CITATION_NUMBER
_CITATION = re.compile(rf"\[\s*(?:sources?\s*:?\s*)?({_NUMBER}(?:\s*[,;]\s*{_NUMBER})*)\s*\]", re.IGNORECASE)
_CITATION_NUMBER = re.compile(r"(\d+)(?:\s*[-–]\s*(\d+))?")
# a written number with more digits than this names no source and is not converted (Python refuses to
# convert more than 4,300 digits, and no prompt holds 10**18 sources)
_MAX_CITATION_DIGITS = 18


@dataclass(frozen=True, slots=True)
class Citation:
    """A ``[n]`` marker of an answer, resolved to the document numbered ``n`` in the prompt.

    Attributes:
        number: the one-based source number the model wrote.
        document: the retrieved document shown as source ``number``.
    """

    number: int
    document: Document

    @property
    def label(self) -> str:
        """The cited source as a reader finds it: ``source_uri`` and, for a PDF chunk, its page
        (``"manual.pdf p. 3"``); see :attr:`~fastrag.models.Document.source_label`."""
        return self.document.source_label


@dataclass(frozen=True, slots=True)
class Prompt:
    """The messages sent to the LLM and the sources they number.

    Attributes:
        messages: a system message (the instructions) and a user message (the numbered sources, then the
            question).
        sources: the documents numbered ``[1]..[n]`` in the prompt, in order: the first ones given that
            fit in the character budget.
    """

    messages: tuple[ChatMessage, ...]
    sources: tuple[Document, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer with its sources, or the reason there is none.

    Attributes:
        text: the LLM's reply; when retrieval failed or found nothing, a sentence saying so (the LLM was
            not called).
        citations: one :class:`Citation` per distinct valid ``[n]`` in ``text``, in order of first
            appearance.
        sources: the documents the prompt numbered ``[1]..[n]`` (empty when the LLM was not called).
        retrieval: the retrieval's outcome: its documents, error, failed branches and timings.
        grounded: ``True`` when the text was generated from at least one retrieved source; ``False`` when
            retrieval failed or found nothing. It does not say the text cites anything: see ``citations``.
        invalid_citations: distinct numbers the reply wrote in brackets that name no source (0, or more
            than ``len(sources)``), in order of first appearance. A number of more than 18 digits is not
            converted: it is neither a citation nor listed here.
    """

    text: str
    citations: tuple[Citation, ...]
    sources: tuple[Document, ...]
    retrieval: RetrievalResult
    grounded: bool
    invalid_citations: tuple[int, ...] = ()

    @property
    def status(self) -> AnswerStatus:
        """``"retrieval_failed"``, ``"no_sources"`` or ``"answered"`` (see :data:`AnswerStatus`)."""
        if self.retrieval.retrieval_failed:
            return "retrieval_failed"
        if not self.grounded:
            return "no_sources"
        return "answered"

    @property
    def partial(self) -> bool:
        """``True`` when retrieval succeeded without some branches (``retrieval.failed_branches``): the
        answer may miss what those branches would have found."""
        return self.retrieval.partial

    @property
    def cited_documents(self) -> tuple[Document, ...]:
        """The documents the answer cites, in order of first citation, without repeats (each source is a
        distinct document: :func:`build_prompt` numbers a document id once)."""
        return tuple(c.document for c in self.citations)


def build_prompt(
    question: str,
    documents: Sequence[Document],
    *,
    system_prompt: str | None = None,
    max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS,
) -> Prompt:
    """The grounded prompt for ``question`` over ``documents`` (best first).

    Each source is a block: ``[n]``, then the header lines ``title: ...``, ``language: ...``,
    ``source_uri: ...``, ``page: 3`` (a PDF chunk's page), ``section: A > B`` (the chunk's heading path) and ``answers: ...`` (when it
    carries :data:`SUB_QUESTIONS`), each only when the document has that metadata, each value on one line
    and cut at :data:`MAX_SOURCE_FIELD_CHARS` characters (ending with ``" …"``); then its content. Blocks
    are separated by a blank line. A document whose id was already numbered is skipped: each source is a
    distinct document, the first occurrence keeping its place.

    ``max_context_chars`` bounds the whole sources section, headers and separators included. Sources are
    added in order while they fit; a source whose header fits but whose content does not is added with its
    content cut to the budget (ending with ``" …"``), and then no more are added; a source whose header
    does not fit is left out, with all after it (they are not in :attr:`Prompt.sources`). The first source
    is always included: if its header alone exceeds the budget, it is shown with its header and ``"…"``
    as content, so the section is at most ``max(max_context_chars, len(first header) + 2)`` characters.

    Args:
        question: the user's question.
        documents: the retrieved documents, best first; at least one.
        system_prompt: the instructions; ``None`` uses :data:`DEFAULT_SYSTEM_PROMPT`.
        max_context_chars: budget for the sources section, in characters (headers and content).

    Returns:
        A :class:`Prompt`.

    Raises:
        InvalidParameterError: an empty question or one that is not valid Unicode; no documents; an item
            that is not a :class:`~fastrag.models.Document`; a ``max_context_chars`` that is not a positive
            int; a ``system_prompt`` that is not a non-empty string.
    """
    check_question(question)
    check_positive_int("max_context_chars", max_context_chars)
    system = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    if not isinstance(system, str) or not system.strip():
        raise InvalidParameterError(f"system_prompt must be None or a non-empty string, got {_shown(system_prompt)}")
    if isinstance(documents, str | bytes) or not isinstance(documents, Sequence) or not documents:
        raise InvalidParameterError("build_prompt needs at least one document")
    for doc in documents:
        if not isinstance(doc, Document):
            raise InvalidParameterError(f"documents must be Document objects, got {type(doc).__name__}")
    blocks: list[str] = []
    sources: list[Document] = []
    numbered: set[str] = set()
    remaining = max_context_chars
    for doc in documents:
        if doc.id in numbered:
            continue
        header = _source_header(len(sources) + 1, doc)
        fixed = (2 if blocks else 0) + len(header) + 1  # the blank line before, the header, its newline
        room = remaining - fixed
        content = doc.content
        if len(content) > room:
            if blocks and room <= len(_TRUNCATED):  # not even one character of content fits
                break
            cut = content[: max(0, room - len(_TRUNCATED))].rstrip()
            content = cut + _TRUNCATED if cut else _TRUNCATED.strip()
            room = 0  # spent: no source after this one
        else:
            room -= len(content)
        numbered.add(doc.id)
        sources.append(doc)
        blocks.append(f"{header}\n{content}")
        remaining = room
        if remaining <= 0:
            break
    user = "Sources:\n\n" + "\n\n".join(blocks) + f"\n\nQuestion: {question.strip()}"
    return Prompt(
        messages=(ChatMessage("system", system), ChatMessage("user", user)),
        sources=tuple(sources),
    )


def _source_header(number: int, doc: Document) -> str:
    lines = [f"[{number}]"]
    for label, key in (("title", TITLE), ("language", LANGUAGE), ("source_uri", SOURCE_URI), ("page", PAGE)):
        value = doc.metadata.get(key)
        if value is not None:
            text = _field((str(value),), "")
            if text:
                lines.append(f"{label}: {text}")
    headings = doc.metadata.get(HEADINGS)
    if isinstance(headings, Sequence) and not isinstance(headings, str) and headings:
        text = _field((str(h) for h in headings), " > ")
        if text:
            lines.append(f"section: {text}")
    asked = doc.metadata.get(SUB_QUESTIONS)
    if isinstance(asked, Sequence) and not isinstance(asked, str) and asked:
        text = _field((str(q) for q in asked), "; ")
        if text:
            lines.append(f"answers: {text}")
    return "\n".join(lines)


def _field(parts: Iterable[str], separator: str, limit: int = MAX_SOURCE_FIELD_CHARS) -> str:
    """``parts`` joined by ``separator``, each on one line, cut at ``limit`` characters (``" …"`` included).

    Reads only as many parts, and as much of each, as the limit needs (a value of megabytes costs no more).
    """
    out: list[str] = []
    length = 0
    for part in parts:
        # whitespace runs collapse to one space, so 4 * limit raw characters hold enough text unless the
        # part is mostly whitespace; a cut there shows fewer characters, never more
        text = " ".join(part[: 4 * limit + 1].split())
        if not text:
            continue
        if out:
            out.append(separator)
            length += len(separator)
        out.append(text)
        length += len(text)
        if length > limit:
            break
    joined = "".join(out)
    if len(joined) > limit:
        return joined[: limit - len(_TRUNCATED)].rstrip() + _TRUNCATED
    return joined


def parse_citations(text: str, sources: Sequence[Document]) -> tuple[tuple[Citation, ...], tuple[int, ...]]:
    """The ``[n]`` citations in ``text``, resolved against ``sources`` (source ``n`` is ``sources[n - 1]``).

    Recognised: ``[1]``, ``[1][3]``, ``[1, 3]``, ``[1; 3]``, ``[2-4]`` (a range, expanded), ``[Source 1]``.
    Any other bracketed text is not a citation. Each number counts once, at its first appearance. The work
    is linear in the length of ``text`` plus ``len(sources)``: a range only visits numbers not seen before,
    so a reply repeating ``[1-2000]`` costs no more than one that writes it once.

    Args:
        text: the model's reply.
        sources: the documents the prompt numbered, in order.

    Returns:
        ``(citations, invalid)``: a :class:`Citation` per distinct valid number, and the distinct numbers
        that name no source (``0``, or more than ``len(sources)``; a range that is reversed or reaches
        past the last source contributes its two ends), both in order of first appearance. A number written
        with more than 18 digits (leading zeros aside) can name no source and is left out of both.

    Raises:
        InvalidParameterError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
    n = len(sources)
    valid: dict[int, None] = {}
    invalid: dict[int, None] = {}
    # next_unseen[v]: a number >= v that may not be in valid yet (path-compressed pointers, so a range
    # skips what earlier citations already added)
    next_unseen: dict[int, int] = {}

    def find(value: int) -> int:
        root = value
        while root in next_unseen:
            root = next_unseen[root]
        while value in next_unseen and next_unseen[value] != root:
            next_unseen[value], value = root, next_unseen[value]
        return root

    def add(value: int) -> None:
        if 1 <= value <= n:
            valid.setdefault(value, None)
            next_unseen[value] = value + 1
        else:
            invalid.setdefault(value, None)

    for match in _CITATION.finditer(text):
        for number in _CITATION_NUMBER.finditer(match.group(1)):
            start = _citation_number(number.group(1))
            end = _citation_number(number.group(2)) if number.group(2) is not None else start
            if start is not None and end is not None and 1 <= start <= end <= n:
                value = find(start)
                while value <= end:
                    add(value)
                    value = find(value + 1)
            else:
                for value in dict.fromkeys((start, end)):
                    if value is not None:
                        add(value)
    citations = tuple(Citation(number=i, document=sources[i - 1]) for i in valid)
    return citations, tuple(invalid)


def _citation_number(digits: str) -> int | None:
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= _MAX_CITATION_DIGITS else None


class QueryEngine:
    """Retrieve, then answer with an LLM from the numbered sources, citing them.

    Args:
        retriever: any :class:`~fastrag.protocols.Retriever`; its ``retrieve_result`` is used when it has
            one (every retriever in :mod:`fastrag.retrieval` does).
        llm: any :class:`~fastrag.protocols.LLM`, e.g. :class:`~fastrag.llm.OpenAICompatibleLLM`.
        k: how many documents to retrieve per question (an int >= 1).
        system_prompt: the instructions; ``None`` uses :data:`DEFAULT_SYSTEM_PROMPT`.
        max_context_chars: budget for the sources section of one prompt (headers and content), in
            characters (see :func:`build_prompt`).
        temperature: passed to ``llm.chat``, a number in [0, 2] (the OpenAI range; 0 is the most
            deterministic); ``None`` leaves the model's default.
        max_tokens: passed to ``llm.chat``, an int >= 1; ``None`` leaves the model's default.

    Raises:
        InvalidParameterError: ``retriever`` has no ``retrieve``, ``llm`` has no ``chat``, ``k`` or
            ``max_context_chars`` is not a positive int, ``system_prompt`` is blank, ``temperature`` is
            not a number in [0, 2], or ``max_tokens`` is not a positive int.
    """

    def __init__(
        self,
        *,
        retriever: Retriever,
        llm: LLM,
        k: int = 5,
        system_prompt: str | None = None,
        max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if llm is None:
            raise InvalidParameterError("llm has no chat() method: None")
        check_engine_settings(retriever, llm, k=k, max_context_chars=max_context_chars, system_prompt=system_prompt,
                             temperature=temperature, max_tokens=max_tokens)
        self.retriever = retriever
        self.llm = llm
        self.k = k
        self.system_prompt = system_prompt
        self.max_context_chars = max_context_chars
        self.temperature = temperature
        self.max_tokens = max_tokens

    async def query(self, question: str, *, k: int | None = None, filter: FilterLike | None = None) -> Answer:  # noqa: A002
        """Retrieve for ``question`` and answer it from what was retrieved.

        Args:
            question: the question, a non-empty string.
            k: how many documents to retrieve; ``None`` uses the engine's ``k``.
            filter: a filter for the retrieval, as for ``retrieve``.

        Returns:
            An :class:`Answer`. A failed retrieval or one that found nothing is an answer too, with
            ``grounded=False`` and a ``status`` saying which (the LLM is not called).

        Raises:
            InvalidParameterError: an empty question or one that is not valid Unicode (a lone surrogate), or
                a bad ``k`` (also as the retriever raises them).
            FilterError: the filter is malformed or cannot be expressed by the backend.
            AuthenticationError, TransientBackendError, BackendError: the LLM failed (as ``llm.chat``
                raises them, after its own retries).
        """
        check_question(question)
        if k is not None:
            check_positive_int("k", k)
        retrieval = await retrieve_with_status(self.retriever, question, k=k or self.k, filter=filter)
        return await self.answer(question, retrieval)

    async def answer(self, question: str, retrieval: RetrievalResult) -> Answer:
        """Answer ``question`` from a retrieval already made (see :meth:`query` for the rules).

        Raises:
            InvalidParameterError: an empty question, or ``retrieval`` is not a
                :class:`~fastrag.retrieval.result.RetrievalResult`.
            AuthenticationError, TransientBackendError, BackendError: the LLM failed, or returned something
                other than a string.
        """
        check_question(question)
        if not isinstance(retrieval, RetrievalResult):
            raise InvalidParameterError(f"retrieval must be a RetrievalResult, got {type(retrieval).__name__}")
        if retrieval.retrieval_failed:
            error = retrieval.error
            text = f"Retrieval failed, so no answer was generated: {type(error).__name__}: {error}"
            return Answer(text=text, citations=(), sources=(), retrieval=retrieval, grounded=False)
        if not retrieval.documents:
            text = "No sources were found for this question, so no answer was generated."
            return Answer(text=text, citations=(), sources=(), retrieval=retrieval, grounded=False)
        prompt = build_prompt(
            question, retrieval.documents, system_prompt=self.system_prompt, max_context_chars=self.max_context_chars
        )
        reply = await self.llm.chat(prompt.messages, temperature=self.temperature, max_tokens=self.max_tokens)
        if not isinstance(reply, str):
            raise BackendError(f"the LLM returned {type(reply).__name__}, not text", store=type(self.llm).__name__)
        citations, invalid = parse_citations(reply, prompt.sources)
        return Answer(
            text=reply,
            citations=citations,
            sources=prompt.sources,
            retrieval=retrieval,
            grounded=True,
            invalid_citations=invalid,
        )

    def __repr__(self) -> str:
        return f"QueryEngine(retriever={self.retriever!r}, llm={self.llm!r}, k={self.k})"


async def retrieve_with_status(
    retriever: Any, query: str, *, k: int, filter: FilterLike | None = None  # noqa: A002
) -> RetrievalResult:
    """Retrieve with a status from any retriever: its ``retrieve_result`` if it has one, otherwise
    :func:`~fastrag.retrieval.result.retrieve_result` around its ``retrieve``.

    At most ``k`` documents are kept. A retriever whose ``retrieve_result`` raises, returns something other
    than a :class:`~fastrag.retrieval.result.RetrievalResult`, or returns items that are not
    :class:`~fastrag.models.Document` objects gives a failed result (``error`` says why).

    Raises:
        InvalidParameterError: the arguments are invalid, as the retriever raises them.
        FilterError: the filter is malformed, as the retriever raises it.
    """
    try:
        if isinstance(retriever, ReturnsResult):
            result = await retriever.retrieve_result(query, k=k, filter=filter)
        else:
            result = await retrieve_result(retriever, query, k=k, filter=filter)
    except (InvalidParameterError, FilterError):
        raise
    except Exception as exc:  # noqa: BLE001 - a retrieval failure is reported, as retrieve_result does
        return RetrievalResult(error=exc)
    if not isinstance(result, RetrievalResult):
        error = BackendError(f"retrieve_result returned {type(result).__name__}, not a RetrievalResult")
        return RetrievalResult(error=error)
    bad = next((d for d in result.documents if not isinstance(d, Document)), None)
    if bad is not None:
        error = BackendError(f"the retriever returned {type(bad).__name__}, not Document objects")
        return RetrievalResult(error=error, failed_branches=result.failed_branches, timings=result.timings)
    if len(result.documents) > k:
        result = RetrievalResult(
            documents=result.documents[:k],
            error=result.error,
            failed_branches=result.failed_branches,
            partial=result.partial,
            timings=result.timings,
        )
    return result
