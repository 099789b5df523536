"""Chroma as a dense :class:`~fastrag.protocols.VectorStore`: cosine k-NN with filters pushed down.

``ChromaVectorStore`` keeps documents, their vectors and their metadata in one Chroma collection, embedded
(``chromadb.EphemeralClient`` / ``PersistentClient``, whose synchronous calls run in worker threads) or on a
Chroma server (``chromadb.AsyncHttpClient``). Chroma has no BM25, so this store is not a
:class:`~fastrag.protocols.LexicalStore`: pair it with one (for example
:class:`~fastrag.vector_store.sqlite.SQLiteVectorStore`) in a
:class:`~fastrag.retrieval.HybridRetriever` (``docs/backends/chroma.md``).

Design:

- **Vectors** live in a collection created with ``configuration={"hnsw": {"space": "cosine"}}`` and
  ``embedding_function=None``; fastrag always passes explicit embeddings (Chroma's default embedding
  function would try to download a model). Chroma returns the cosine *distance*; the score is
  ``1 - distance``, the cosine similarity in [-1, 1]. HNSW is approximate; on small collections (fewer
  records than ``ef_search``, 100) it visits every vector and is exact.
- **Metadata** round-trips exactly through a JSON copy under ``fastrag:json``. Chroma metadata holds only
  scalars and homogeneous lists, so filtering uses flat fields derived from it, written next to the copy
  (``k`` is a top-level metadata key; see :func:`chroma_metadata`):

  ================================  =========================================================================
  field                             holds
  ================================  =========================================================================
  ``k``                             a string or bool value as is; a number as is (ints within 64 bits)
  ``fastrag:num:k``                 a number as a 64-bit float (Chroma compares an int field with a float
                                    operand after truncating the operand, so numbers are compared here)
  ``fastrag:date:k``                an ISO-8601 date string as epoch microseconds (UTC), for date ranges
  ``fastrag:prefix:k``              a string's prefixes, of 0 to :data:`PREFIX_INDEX_LENGTH` characters
  ``fastrag:list:{str,bool,num}:k`` the string, bool and number (as float) elements of a list value
  ``fastrag:keys:num`` / ``:date``  the keys holding a number / a date, to express "not a number"
  ================================  =========================================================================

  A key that starts with ``fastrag:``, ``chroma:``, ``#`` or ``$`` (reserved by Chroma or by us) is stored
  as ``fastrag:key:<key>``. Nested mappings, ``None`` and list elements that are not scalars are kept in
  the JSON copy only: no filter can select them, which is exactly what :func:`fastrag.filters.matches` says.
- **Filters** are translated by :func:`translate_filter` into one Chroma ``where`` (no post-filtering). Chroma
  has no ``$not``, so negations are pushed down to the leaves (De Morgan); a negated range becomes "the
  opposite range, or the key holds no number/date". ``$ne``, ``$nin`` and ``$not_contains`` select records
  that lack the field (Chroma >= 0.6 semantics, pinned by this module's tests), which is what
  ``notEquals``/``notIn`` need. ``stringContains`` with a non-empty value and ``startsWith`` with a prefix
  longer than :data:`PREFIX_INDEX_LENGTH` raise :class:`~fastrag.errors.UnsupportedFilterError`.
- **Native filters**: pass ``filter=ChromaWhere(where={...}, where_document={...})`` to hand Chroma a
  ``where`` / ``where_document`` of your own, unchanged.
- **Upserts** replace a record's metadata: Chroma's ``upsert`` merges metadata, so fields of the previous
  version are read first and deleted (set to ``None``) in the same ``upsert`` call.

The package: ``store.py`` (the store), ``filters.py`` (the pure filter translation and :class:`ChromaWhere`),
``schema.py`` (the record layout: field names, :func:`chroma_metadata`, records back to documents),
``connection.py`` (URLs, the chromadb import, SDK errors to fastrag's, the shared HTTP clients). chromadb is
imported only when a store is built, so importing this package needs no extra installed.
"""

# The names outside __all__ are the record layout's and the translation's building blocks, importable from here
# as they were from the single module this package replaced (tests and users import NEVER_WHERE, native_key, ...).
from fastrag.vector_store.chroma.filters import (
    NEVER_WHERE,
    ChromaWhere,
    Where,
    translate_filter,
)
from fastrag.vector_store.chroma.schema import (
    DATE_KEYS,
    DEFAULT_COLLECTION,
    FORMAT_VERSION,
    JSON_KEY,
    NUMBER_KEYS,
    PREFIX_INDEX_LENGTH,
    chroma_metadata,
    date_key,
    list_key,
    native_key,
    number_key,
    prefix_key,
)
from fastrag.vector_store.chroma.store import ChromaVectorStore

__all__ = [
    "DEFAULT_COLLECTION",
    "PREFIX_INDEX_LENGTH",
    "ChromaVectorStore",
    "ChromaWhere",
    "chroma_metadata",
    "translate_filter",
]
