"""A document as the rows a :class:`~fastrag.vector_store.postgres.PgVectorStore` stores, and back: text
PostgreSQL can hold (U+0000 encoded), metadata checks, and the date column filters compare."""

from __future__ import annotations

import json
from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.filters import parse_date
from fastrag.models import Document
from fastrag.vector_store._metadata import epoch_micros

__all__ = [
    "check_metadata",
    "check_text",
    "check_unicode",
    "date_shadow",
    "decode_text",
    "encode_text",
    "row_document",
]


def check_unicode(value: str, what: str) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate: UTF-8 cannot encode it), naming ``what``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(f"{what} holds text that is not valid Unicode ({exc.reason})") from exc


def check_text(value: str, what: str) -> None:
    """Refuse text PostgreSQL's ``text`` and ``jsonb`` cannot store (U+0000, a lone surrogate), naming ``what``."""
    if "\x00" in value:
        raise InvalidParameterError(f"{what} holds the character U+0000, which PostgreSQL text cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(f"{what} holds text that is not valid Unicode ({exc.reason})") from exc


_ESCAPE = "\U0010ffff"  # a noncharacter: the escape of the two-character codes below


def encode_text(text: str) -> str:
    """``text`` as PostgreSQL can store it: U+0000 becomes ``ESC 0`` and ESC itself ``ESC e`` (ESC is the
    noncharacter U+10FFFF), an injective code, so ids that differ only after a U+0000 stay distinct. Used for
    ids and contents, which are compared only for equality; :func:`decode_text` reverses it."""
    if "\x00" not in text and _ESCAPE not in text:
        return text
    return text.replace(_ESCAPE, _ESCAPE + "e").replace("\x00", _ESCAPE + "0")


def decode_text(text: str) -> str:
    """The text :func:`encode_text` encoded."""
    if _ESCAPE not in text:
        return text
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == _ESCAPE and i + 1 < len(text):
            out.append("\x00" if text[i + 1] == "0" else _ESCAPE)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def row_document(doc_id: str, content: str, metadata_text: str) -> Document:
    """The document a stored row holds (id and content decoded, metadata parsed from its JSON text)."""
    return Document(id=decode_text(doc_id), content=decode_text(content), metadata=json.loads(metadata_text))


def check_metadata(value: Any, what: str) -> None:
    """Refuse U+0000 and lone surrogates anywhere in metadata keys and strings (jsonb cannot hold them)."""
    if isinstance(value, str):
        check_text(value, what)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, what)
            check_metadata(item, what)
    elif isinstance(value, list):
        for item in value:
            check_metadata(item, what)


def date_shadow(metadata: dict[str, Any]) -> dict[str, int]:
    """``{key: epoch µs}`` for the metadata values that are date strings (the ``dates`` column)."""
    out = {}
    for key, value in metadata.items():
        if isinstance(value, str):
            moment = parse_date(value)
            if moment is not None:
                out[key] = epoch_micros(moment)
    return out
