"""A document as the row a Milvus collection stores, and a stored row (or hit entity) as a document again."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fastrag.errors import InvalidParameterError
from fastrag.models import TITLE, Document
from fastrag.vector_store._metadata import metadata_json
from fastrag.vector_store.milvus.filters import decode_text, encode_id, filter_values
from fastrag.vector_store.milvus.schema import (
    CONTENT_FIELD,
    FILTER_FIELD,
    ID_FIELD,
    INT64_MAX,
    INT64_MIN,
    MAX_VARCHAR_BYTES,
    METADATA_FIELD,
    TEXT_FIELD,
)

__all__ = ["document", "document_row"]


def document_row(doc: Document) -> dict[str, Any]:
    """The row ``doc`` is stored as, without its vector fields (the store adds those): the id encoded
    (:func:`~fastrag.vector_store.milvus.filters.encode_id`), content, metadata, the filter values and the BM25
    text (``title + "\\n" + content``).

    Raises:
        InvalidParameterError: an id, content or BM25 text longer than 65535 UTF-8 bytes or not valid Unicode,
            metadata that is not JSON, a metadata integer beyond int64, a metadata key that is not valid Unicode.
    """
    metadata, _ = metadata_json(doc)
    title = doc.metadata.get(TITLE)
    text = f"{title}\n{doc.content}" if isinstance(title, str) and title else doc.content
    for label, value in (("id", doc.id), ("content", doc.content), ("title + content", text)):
        if label == "id" and isinstance(value, str):
            value = encode_id(value)  # as stored: a line break or quote takes 3 characters
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidParameterError(f"document {doc.id!r}: {label} is not valid Unicode text") from exc
        if size > MAX_VARCHAR_BYTES:
            raise InvalidParameterError(
                f"document {doc.id!r}: {label} is {size} UTF-8 bytes; Milvus holds at most "
                f"{MAX_VARCHAR_BYTES} (chunk the text)"
            )
    beyond = int_beyond_int64(metadata)
    if beyond is not None:
        raise InvalidParameterError(
            f"document {doc.id!r}: metadata integer {beyond!r} is beyond int64, the range Milvus's JSON holds "
            "(store it as a string or a float)"
        )
    try:
        values = filter_values(metadata)
    except UnicodeEncodeError as exc:
        raise InvalidParameterError(f"document {doc.id!r}: a metadata key is not valid Unicode text") from exc
    return {ID_FIELD: encode_id(doc.id), CONTENT_FIELD: doc.content, METADATA_FIELD: metadata, FILTER_FIELD: values,
            TEXT_FIELD: text}


def document(row: Mapping[str, Any]) -> Document:
    """The document a Milvus row or hit entity holds (its id decoded, see :func:`~.filters.encode_id`)."""
    metadata = row.get(METADATA_FIELD)
    if isinstance(metadata, str | bytes):
        metadata = json.loads(metadata)
    return Document(id=decode_text(str(row[ID_FIELD])), content=row.get(CONTENT_FIELD) or "", metadata=metadata or {})


def int_beyond_int64(value: Any) -> int | None:
    """The first integer in a JSON-like ``value`` (nested lists and objects included) outside int64, if any."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if not INT64_MIN <= value <= INT64_MAX else None
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            found = int_beyond_int64(item)
            if found is not None:
                return found
    return None
