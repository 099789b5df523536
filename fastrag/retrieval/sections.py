"""Deprecated: the section index moved to :mod:`fastrag.sections` (outside retrieval, which never imports ingestion).

``from fastrag.retrieval.sections import SectionIndex`` still works and gives the same objects as
``from fastrag.sections import SectionIndex`` (every name of ``fastrag.sections.__all__``), with a
:class:`DeprecationWarning` naming the new path.
"""

from __future__ import annotations

import warnings

from fastrag import sections as _sections
from fastrag.sections import *  # noqa: F403 - the old path re-exports every name of the new one

__all__ = list(_sections.__all__)

warnings.warn(
    "fastrag.retrieval.sections is deprecated: import from fastrag.sections instead "
    "(from fastrag.sections import SectionIndex, merge_chunks, ...)",
    DeprecationWarning,
    stacklevel=2,
)
