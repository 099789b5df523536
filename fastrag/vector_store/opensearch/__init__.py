"""OpenSearch: k-NN (:class:`~fastrag.protocols.VectorStore`) and BM25 (:class:`~fastrag.protocols.LexicalStore`)
in one index, through the async ``opensearch-py`` client (``pip install "fastrag-retrieval[opensearch]"``).

Design (the docs page ``docs/backends/opensearch.md`` has the full tables):

- **One index, one document per fastrag document.** ``_id`` is the document id (ids longer than 512 UTF-8
  bytes, OpenSearch's limit, or starting with ``~h:`` are stored under ``~h:`` + SHA-256 of the id; the
  original id is always the ``id`` keyword field, which every query and sort uses).
- **BM25** is OpenSearch's own (Lucene ``BM25Similarity``, k1 = 1.2, b = 0.75): a ``match`` query (terms
  OR-ed) on ``content`` and on ``title`` (``metadata["title"]`` when it is a string), both ``text`` fields
  with the ``english`` analyzer by default (standard tokenizer, lowercasing, English stopwords, Porter
  stemming). A document sharing no analysed term with the query cannot match a ``match`` query, so it is
  never returned.
- **k-NN** is the k-NN plugin: a ``knn_vector`` field (``hnsw``, engine ``lucene``, space ``cosinesimil``).
  By default :meth:`OpenSearchVectorStore.search_vector` sends a ``knn`` query with the filter *inside* it
  (efficient filtering: Lucene picks an exact pre-filtered search or a filtered HNSW walk, so a filtered
  top-k is not short while enough documents match). With ``exact=True`` it sends a ``script_score`` query
  with the plugin's ``knn_score`` script over the filtered documents instead (brute force, exact, slower on
  large indexes). Scores are converted back to cosine similarity in [-1, 1]: the ``knn`` query scores
  ``(1 + cos) / 2`` and the script ``1 + cos`` (OpenSearch docs, "Spaces" and "Exact k-NN with scoring
  script").
- **Metadata** is kept verbatim as a JSON string (``metadata_json``, neither indexed nor in doc values), so it
  round-trips exactly (ints stay ints, ``3.0`` stays a float, bools stay bools, nested values survive).
  For filtering, every top-level value is also written to a typed *shadow* field, one namespace per type, so
  the type rules of :mod:`fastrag.filters` hold exactly: ``f_str.<key>`` (keyword), ``f_int.<key>`` (long),
  ``f_num.<key>`` (double, floats), ``f_bool.<key>`` (boolean), ``f_date.<key>`` (long: epoch
  microseconds, UTC, for strings that are ISO-8601 dates), and for list elements ``l_str``, ``l_int``,
  ``l_num``, ``l_bool``. The string ``"2020"`` and the number ``2020`` live in different fields, so they
  never compare; a missing key is simply an absent field. Keys are percent-encoded into field names
  (:func:`encode_key`), so a dot is part of the key, not a path, and no key can address another field.
- **Filters** become Query DSL (:func:`translate_filter`): ``bool`` ``filter`` / ``should`` with
  ``minimum_should_match: 1`` / ``must_not`` over ``term``, ``terms``, ``range``, ``prefix``, ``wildcard``
  and ``exists``. Values are JSON values in the request body, never spliced into query strings; the only
  escaping needed is ``\\``, ``*`` and ``?`` in the ``wildcard`` pattern of ``stringContains``. Every
  construct of the filter language is expressed exactly; nothing raises
  :class:`~fastrag.errors.UnsupportedFilterError`.
- **Native filters**: pass ``filter=OpenSearchQuery({...})`` to use any Query DSL query as the filter. A plain
  mapping is always read as a fastrag filter, so the two can never be confused.
- **Writes** go through the ``_bulk`` API with ``refresh=true`` by default, so a write is visible to the next
  read. OpenSearch has no multi-document transactions: if some documents of a batch are rejected, the others
  are written and :class:`~fastrag.errors.BackendError` lists the rejected ids. Everything fastrag can check
  (dimensions, NaN, zero vectors, JSON, over-long keyword values) is checked before anything is sent.

The package: ``store.py`` (the store), ``filters.py`` (the pure filter translation and :class:`OpenSearchQuery`),
``schema.py`` (the index mapping and the ``_source`` of a document), ``search.py`` (the ``_search`` bodies of
BM25 and k-NN), ``connection.py`` (the SDK import, index names, URLs, error texts). opensearch-py is imported
only when a store is built, so importing this package needs no extra installed.
"""

# The names outside __all__ are importable from here as they were from the single module this package replaced.
from fastrag.vector_store.opensearch.connection import INSTALL_HINT
from fastrag.vector_store.opensearch.filters import (
    OpenSearchQuery,
    escape_wildcard,
    translate_filter,
)
from fastrag.vector_store.opensearch.schema import (
    INT64_MAX,
    INT64_MIN,
    MAX_ID_BYTES,
    MAX_KEYWORD_BYTES,
    SCHEMA_VERSION,
    document_source,
    encode_key,
    index_body,
    vector_mapping,
)
from fastrag.vector_store.opensearch.search import (
    MAX_RESULT_WINDOW,
    knn_search_body,
    text_search_body,
)
from fastrag.vector_store.opensearch.store import OpenSearchVectorStore, Refresh

__all__ = [
    "SCHEMA_VERSION",
    "OpenSearchQuery",
    "OpenSearchVectorStore",
    "document_source",
    "encode_key",
    "escape_wildcard",
    "index_body",
    "knn_search_body",
    "text_search_body",
    "translate_filter",
    "vector_mapping",
]
