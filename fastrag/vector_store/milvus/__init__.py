"""Milvus as a fastrag store: dense k-NN, BM25 and server-side hybrid search in one collection.

``MilvusVectorStore`` implements :class:`~fastrag.protocols.VectorStore` and :class:`~fastrag.protocols.SupportsGet`
over a Milvus collection and, with ``enable_bm25=True``, :class:`~fastrag.protocols.LexicalStore` through
Milvus's built-in BM25 function, so one open store serves both branches of a hybrid retriever.
:class:`MilvusHybridRetriever` runs both branches inside Milvus (``hybrid_search`` with an RRF or weighted
ranker) with the filter applied to each. The same code runs against:

- **Milvus Lite in this process**: ``url="./data/fastrag.db"`` (a path ending in ``.db``). The ``milvus``
  extra installs milvus-lite 2.5.1, the official native Milvus 2.5 build: pymilvus starts it as a child
  process serving that file over a Unix socket; closing the last store on the path stops it and releases
  the file's lock (unless something else in the process started it first).
- **a Milvus server**: ``url="http://host:19530"``: Milvus standalone/distributed, Zilliz Cloud
  (``https://...`` with ``token=``), or milvus-lite 2.5.1's binary serving a file over TCP.

milvus-lite 3.x (``pip install "milvus-lite>=3"``) is a Python re-implementation of Milvus's API, not Milvus;
the store runs on it, but CI does not test it: treat it as an emulation.

The package: ``store.py`` (the store), ``filters.py`` (the pure filter translation), ``hybrid.py`` (server-side
fusion and its retriever), ``connection.py`` (URLs, the SDK boundary, in-process servers), ``results.py``
(hits ranked, ties at the cut), ``rows.py`` (a document as a stored row, and back), ``schema.py`` (the
collection layout: field names, limits, the schema and indexes a new collection gets, and the check of an
existing one).

Collection schema (created on the first write, or on open when ``dimension=`` is given)::

    id            VARCHAR(65535), primary key: the document id as given
    content       VARCHAR(65535): the document text, returned as is
    metadata      JSON: the metadata as given (round-trips ints within int64, floats, bools, lists, objects)
    filter_values JSON: typed, normalised copies of the top-level metadata values (see below)
    has_vector    BOOL: whether the document was written with an embedding               (dense only)
    embedding     FLOAT_VECTOR(dim), FLAT index (exact), metric COSINE                    (dense only)
    text          VARCHAR(65535) with an analyzer: title + content, the BM25 input         (enable_bm25 only)
    sparse        SPARSE_FLOAT_VECTOR, BM25 function output from ``text``, k1 1.2, b 0.75  (enable_bm25 only)

The collection properties record ``fastrag.schema_version`` (2) and ``fastrag.embedding_model``. A collection
whose first write has no embeddings and no ``dimension=`` was given is BM25-only (no dense fields): it serves
keyword search, k-NN finds nothing in it, and writing vectors to it raises.

Filters (:func:`translate_filter`) become Milvus boolean expressions over ``filter_values``, never over
``metadata``, because Milvus compares JSON values loosely (``"2020"`` and ``2020`` meet in some engines, a
missing key makes a comparison null). On upsert each top-level metadata value ``v`` under key ``k`` is copied
into ``filter_values`` under a typed name, with ``H`` the hex of ``k``'s UTF-8 bytes (so no key needs
escaping)::

    s_H   a string, in a wildcard-free encoding (see "Strings and LIKE")
    d_H   a string that is an ISO-8601 date: the instant in integer microseconds since 1970-01-01 UTC
    n_H   a number (not a bool) as an IEEE double
    b_H   a bool
    m_s_H / m_d_H / m_n_H = 1   presence markers beside s_, d_ and n_
    l_H_<digest> = 1            one key per distinct string / number / bool element of a list

so a bool is never compared with a number, a string never with a number, and date ranges compare instants
(offsets and date-only values normalised to UTC). Milvus 2.5 (as milvus-lite 2.5.1 builds it) refuses
``not`` and ``exists``, so the translation pushes every negation down to the comparisons and uses only
what Milvus evaluates on a missing JSON path as false (``==``, ranges, ``like``) or as true (``!=``): a
negated range is "marker missing or the complementary range", a negated ``listContains`` is the element
key ``!= 1``, a negated ``startsWith`` is "marker missing or outside the prefix's string interval".
``notEquals`` and ``notIn`` match a missing key. A negated ``stringContains`` (non-empty) has no such form
and raises :class:`~fastrag.errors.UnsupportedFilterError`.

Strings and LIKE: Milvus has no literal substring test, and ``like`` has no escape for ``%`` and ``_`` in
every engine. The ``s_`` copy therefore replaces ``%``, ``_``, ``\\`` and four private-use characters
(U+E000..U+E003) by three-character codes ``U+E000 d1 d2`` (``d`` in U+E001..U+E003), so no ``%``, ``_``
or ``\\`` is left. The code is prefix-free and no match can begin inside a code, so ``s`` starts with
(contains) ``p`` exactly when ``encode(s)`` starts with (contains) ``encode(p)``, and
``startsWith``/``stringContains`` become ``like "<encode(p)>%"`` / ``like "%<encode(p)>%"`` with no wildcard
left in the literal part.

Numbers are compared as IEEE doubles, exact for every filter value of magnitude below 2**53; a filter with a
larger number raises :class:`~fastrag.errors.UnsupportedFilterError`. Metadata integers beyond int64 (what
Milvus's JSON holds) raise :class:`~fastrag.errors.InvalidParameterError` on upsert.

Native filters: pass ``filter=MilvusExpr('metadata["lang"] == "en"')`` to any method to send a Milvus
expression unchanged (Milvus's own semantics; it may use ``id``, ``content``, ``metadata[...]``).
A ``str`` filter is always fastrag's JSON form, so the two cannot be confused.
"""

from fastrag.vector_store.milvus.filters import (
    MilvusExpr,
    decode_text,
    encode_text,
    escape_like,
    filter_values,
    string_literal,
    translate_filter,
)
from fastrag.vector_store.milvus.hybrid import MilvusHybridRetriever
from fastrag.vector_store.milvus.store import MilvusVectorStore

__all__ = [
    "MilvusExpr",
    "MilvusHybridRetriever",
    "MilvusVectorStore",
    "decode_text",
    "encode_text",
    "escape_like",
    "filter_values",
    "string_literal",
    "translate_filter",
]
