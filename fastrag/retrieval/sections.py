"""Deprecated: the section index moved to :mod:`fastrag.sections` (outside retrieval, which never imports ingestion).

``from fastrag.retrieval.sections import SectionIndex`` still works and gives the same objects as
``from fastrag.sections import SectionIndex``, with a :class:`DeprecationWarning` naming the new path.
"""

from __future__ import annotations

import warnings

from fastrag.sections import (
    MERGED_FROM,
    SECTION_END,
    SECTION_INDEX,
    SECTION_START,
    ParentDocument,
    SectionIndex,
    SourceSection,
    merge_chunks,
)

__all__ = [
    "MERGED_FROM",
    "SECTION_END",
    "SECTION_INDEX",
    "SECTION_START",
    "ParentDocument",
    "SectionIndex",
    "SourceSection",
    "merge_chunks",
]

warnings.warn(
    "fastrag.retrieval.sections is deprecated: import from fastrag.sections instead "
    "(from fastrag.sections import SectionIndex, merge_chunks, ...)",
    DeprecationWarning,
    stacklevel=2,
)
