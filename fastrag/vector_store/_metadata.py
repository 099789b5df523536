"""How the vector store adapters store a document's metadata: its JSON text, and the typed values of the
shadow fields that filters run on (numbers, dates as epoch microseconds)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.models import Document

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def plain(value: Any) -> Any:
    """A JSON-ready copy of ``value``: mappings become dicts with ``str`` keys, tuples become lists.

    Raises:
        ValueError: a float is NaN or infinity (JSON has no such numbers).
    """
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"non-finite float {value!r}")
    return value


def metadata_json(document: Document) -> tuple[dict[str, Any], str]:
    """``document``'s metadata as a JSON-ready dict (see :func:`plain`) and as JSON text (non-ASCII kept).

    Raises:
        InvalidParameterError: the metadata is not JSON-serialisable or holds NaN or infinity.
    """
    try:
        metadata = plain(document.metadata)
        return metadata, json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(f"document {document.id!r}: metadata must be JSON-serialisable: {exc}") from exc


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (a bool is not a number here)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def epoch_micros(moment: datetime) -> int:
    """Microseconds since 1970-01-01T00:00:00Z of an aware datetime (as :func:`fastrag.filters.parse_date`
    returns), exactly: no float rounding."""
    return (moment - _EPOCH) // _MICROSECOND
