"""Answering questions with an LLM over what was retrieved: :class:`QueryEngine` (grounded answers with
citations) and :class:`SubQuestionEngine` (multi-part questions, one retrieval per part, concurrently)."""

from fastrag.querying.engine import (
    SUB_QUESTIONS,
    Answer,
    Citation,
    Prompt,
    QueryEngine,
    build_prompt,
    parse_citations,
    retrieve_with_status,
)
from fastrag.querying.sub_question import SubQuestionEngine, SubQuestionResult, split_question

__all__ = [
    "SUB_QUESTIONS",
    "Answer",
    "Citation",
    "Prompt",
    "QueryEngine",
    "SubQuestionEngine",
    "SubQuestionResult",
    "build_prompt",
    "parse_citations",
    "retrieve_with_status",
    "split_question",
]
