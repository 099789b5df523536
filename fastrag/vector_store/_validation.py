"""Argument checks the vector store adapters share: ``k``, embedding matrices and query vectors.

Each runs before any backend call, so a bad argument never reaches a server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastrag.errors import DimensionMismatchError, InvalidParameterError
from fastrag.limits import check_positive_int
from fastrag.models import Document


def check_k(k: Any, name: str = "k") -> int:
    """Return ``k`` if it is an int > 0 (bools rejected).

    Raises:
        InvalidParameterError: otherwise (``"<name> must be a positive int, got ..."``).
    """
    return check_positive_int(k, name)


def check_dimension(width: int, dimension: int | None, *, store: str, what: str) -> None:
    """Check a vector width against the store's ``dimension`` (``None``: not fixed yet, anything goes).

    Args:
        width: the width of the vectors given.
        dimension: the store's dimension, or ``None`` before its first vector.
        store: how the message names the store (its name, path or location).
        what: the subject of the message, ``"embeddings have"`` or ``"query has"``.

    Raises:
        DimensionMismatchError: ``"<store>: <what> dimension <width>, the store holds <dimension>"``.
    """
    if dimension is not None and width != dimension:
        raise DimensionMismatchError(f"{store}: {what} dimension {width}, the store holds {dimension}")


def check_embeddings(embeddings: Any, n: int, *, dimension: int | None, store: str) -> np.ndarray:
    """Return ``embeddings`` as an ``(n, dim)`` float32 matrix, ``dim > 0``, all finite, fitting ``dimension``.

    Raises:
        DimensionMismatchError: not two-dimensional, not ``n`` rows, zero columns, or a width other than
            ``dimension``.
        InvalidParameterError: a value is NaN or infinity.
    """
    matrix = np.asarray(embeddings, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != n or matrix.shape[1] == 0:
        raise DimensionMismatchError(f"embeddings must have shape ({n}, dim), got {matrix.shape}")
    check_dimension(matrix.shape[1], dimension, store=store, what="embeddings have")
    if not np.isfinite(matrix).all():
        raise InvalidParameterError("embeddings contain NaN or infinity")
    return matrix


def check_query_vector(embedding: Any, *, dimension: int | None, store: str) -> np.ndarray:
    """Return ``embedding`` as a ``(dim,)`` float32 vector, all finite, not all zeros, fitting ``dimension``.

    Every store refuses an all-zero query: its cosine with anything is undefined, and answering with
    arbitrary neighbours (or with nothing) would hide the problem. ``VectorRetriever`` never sends one: a
    question whose words the model does not know embeds to zero, and it returns no dense hits for it.

    Raises:
        DimensionMismatchError: not one-dimensional, or a width other than ``dimension``.
        InvalidParameterError: a value is NaN or infinity, or every value is zero.
    """
    query = np.asarray(embedding, dtype=np.float32)
    if query.ndim != 1:
        raise DimensionMismatchError(f"query embedding must have shape (dim,), got {query.shape}")
    if not np.isfinite(query).all():
        raise InvalidParameterError("query embedding contains NaN or infinity")
    if query.size and not query.any():
        raise InvalidParameterError("query embedding is all zeros; cosine similarity is undefined")
    check_dimension(query.shape[0], dimension, store=store, what="query has")
    return query


def _is_unicode(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: no lone surrogate (``"\\ud800"``), which no store can keep faithfully."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_id_text(doc_id: Any) -> None:
    """Refuse an id that is not a str of valid Unicode.

    A lone surrogate cannot be encoded as UTF-8: one store would raise a raw ``UnicodeEncodeError``,
    another would store a mangled id (``"b\\ufffd..."``) that no later ``get`` finds. NUL and control
    characters are valid and stay distinct (``"a\\x00x"`` is not ``"a"``).

    Raises:
        InvalidParameterError: ``doc_id`` is not a str, or holds a lone surrogate.
    """
    if not isinstance(doc_id, str):
        raise InvalidParameterError(f"ids must be strings, got {doc_id!r}")
    if not _is_unicode(doc_id):
        raise InvalidParameterError(f"id {doc_id!r} is not valid Unicode (a lone surrogate); it cannot be stored")


def check_unique_ids(documents: Sequence[Document]) -> list[str]:
    """Return the ids of ``documents`` (one ``upsert`` call's), in order.

    Raises:
        InvalidParameterError: an id repeats, or is not valid Unicode (see :func:`check_id_text`).
    """
    ids = [d.id for d in documents]
    for doc_id in ids:
        check_id_text(doc_id)
    if len(set(ids)) != len(ids):
        raise InvalidParameterError("upsert got the same document id twice in one call")
    return ids


def check_document_text(documents: Sequence[Document]) -> None:
    """Refuse documents whose content, metadata keys or metadata strings (at any depth) are not valid Unicode.

    Runs before anything is written, so a bad document never reaches a store that would raise a raw
    ``UnicodeEncodeError`` or keep a mangled copy (replacement characters in place of the text given).

    Raises:
        InvalidParameterError: names the document; nothing was written.
    """
    for doc in documents:
        pending: list[Any] = [doc.content, doc.metadata]
        while pending:  # iterative: metadata may nest deeper than Python's recursion limit
            item = pending.pop()
            if isinstance(item, str):
                if not _is_unicode(item):
                    raise InvalidParameterError(
                        f"document {doc.id!r} holds text that is not valid Unicode (a lone surrogate); "
                        "nothing was written"
                    )
            elif isinstance(item, Mapping):
                for key, value in item.items():
                    pending.append(key)
                    pending.append(value)
            elif isinstance(item, list | tuple):
                pending.extend(item)


def distinct_ids(ids: Sequence[str] | None) -> list[str] | None:
    """``ids`` without repeats, in first-seen order (``None`` stays ``None``: no restriction by id).

    Raises:
        InvalidParameterError: ``ids`` is a single string, or holds something other than strings, or an
            id that is not valid Unicode (see :func:`check_id_text`).
    """
    if ids is None:
        return None
    if isinstance(ids, str):
        raise InvalidParameterError("ids must be a sequence of strings, not one string")
    out = list(dict.fromkeys(ids))
    for doc_id in out:
        check_id_text(doc_id)
    return out
