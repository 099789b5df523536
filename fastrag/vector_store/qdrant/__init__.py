"""Qdrant adapter: dense k-NN, BM25 over a scored text index, the fastrag filter language, server-side hybrid.

``QdrantVectorStore`` implements :class:`~fastrag.protocols.VectorStore` and :class:`~fastrag.protocols.SupportsGet`,
and with ``enable_bm25=True`` also :class:`~fastrag.protocols.LexicalStore`, over a Qdrant server
(``url=``, through ``AsyncQdrantClient``), qdrant-client's local mode (``location=":memory:"`` or
``path=``) or, a prototype, Qdrant Edge shards (``edge_path=``). ``QdrantHybridRetriever`` runs the dense and BM25 legs and their fusion (RRF or DBSF) inside
Qdrant, in one Query API request, with the filter on every leg. Install with ``pip install "fastrag-retrieval[qdrant]"``;
the SDK is imported only when a store is built or a filter translated. The docs page is
``docs/backends/qdrant.md``.

Design:

- **Points.** Qdrant point ids must be unsigned ints or UUIDs, so a document's point id is
  ``uuid5(POINT_ID_NAMESPACE, document.id)`` and the id itself is kept in the payload. The payload is
  ``{"id", "content", "metadata", "_f", "_bm25"}``: ``metadata`` as given (so native Qdrant filters can use
  ``metadata.<key>``), ``_f`` the filter shadow fields below, ``_bm25`` the analysed BM25 terms.
  The dense vector is the named vector ``"dense"`` (cosine); a document written without an embedding has
  none and is found only by BM25.
- **Filters** never run against ``metadata`` itself: Qdrant's own rules differ from
  :func:`fastrag.filters.matches` (a condition on an array payload matches when *any* element matches, so a
  list would ``equals`` its elements; ``1.0`` and ``1`` are different match values; ranges only know
  numbers and RFC 3339 strings). At write time every metadata key gets a small object of *shadow fields*
  under ``_f.<encoded key>``, each holding only values of one kind:

  - ``s``: a string value, as is (equals, in, startsWith, stringContains);
  - ``n``: a number (not a bool) as a canonical decimal string, ``str(int(v))`` when integral, else
    ``repr(v)``, so equality is exact and ``1 == 1.0`` (equals, in);
  - ``b``: a bool (equals, in);
  - ``r``: a number (not a bool) as a float64 (numeric ranges);
  - ``t``: a date-like string (:func:`fastrag.filters.parse_date`) as float64 microseconds since
    1970-01-01T00:00:00Z (date ranges);
  - ``l``: a list's scalar elements as tagged strings ``"s:<str>"``, ``"n:<number>"``, ``"b:true"``
    (listContains; here Qdrant's any-element matching is exactly the semantics wanted).

  A key made of ASCII letters, digits and ``_`` is encoded as ``k_<key>``; any other key (dots, quotes,
  unicode) as ``x_<hex of its UTF-8 bytes>``, so no key is ever parsed as a Qdrant JSON path and no two
  keys collide. :func:`translate_filter` maps the AST onto these fields (see its docstring); the result
  is exactly :func:`fastrag.filters.matches`, including missing keys (a condition on an absent shadow
  field is false, so ``must_not`` of it is true).
- **BM25** is Qdrant's own (1.20+): a text index with ``scoring`` on ``_bm25`` and a ``TextQuery``, with
  k1 = 1.2 and b = 0.75 and the corpus statistics (document count, document frequency, average length)
  kept live by Qdrant. The terms are fastrag's :class:`~fastrag.analysis.Analyzer` output (stemmed,
  stopwords removed, CJK bigrams), joined by spaces; the index uses the plain ``word`` tokenizer, which
  leaves such terms unchanged, so the analysis is the same as the SQLite store's. Qdrant's IDF is
  Lucene's ``ln(1 + (N - n + 0.5) / (n + 0.5))``.
- **Blocking.** Local mode computes in Python in the calling thread, so the adapter drives it through
  the synchronous ``QdrantClient`` in a worker thread (serialised by a lock) instead of blocking the
  event loop; a server is used through ``AsyncQdrantClient``. An injected client may be either kind.

The package: ``store.py`` (the store), ``filters.py`` (the pure filter translation), ``hybrid.py`` (the
server-side hybrid retriever), ``schema.py`` (payload fields, point ids, the shadow fields), ``connection.py``
(the SDK import, URLs, which SDK errors mean an outage), ``edge.py`` (filters as Qdrant Edge objects) and
``edge_client.py`` (the ``edge_path=`` prototype: the store's client calls served by Qdrant Edge shards,
Qdrant's own engine in process).
"""

# The names outside __all__ are importable from here as they were from the single module this package replaced.
from fastrag.vector_store.qdrant.connection import INSTALL_HINT
from fastrag.vector_store.qdrant.filters import translate_filter
from fastrag.vector_store.qdrant.hybrid import QdrantHybridRetriever
from fastrag.vector_store.qdrant.schema import (
    BM25_B,
    BM25_K1,
    CONTENT_FIELD,
    DEFAULT_COLLECTION,
    DENSE,
    ID_FIELD,
    METADATA_FIELD,
    POINT_ID_NAMESPACE,
    SCHEMA_VERSION,
    SHADOW_FIELD,
    TERMS_FIELD,
    point_id,
    shadow_fields,
)
from fastrag.vector_store.qdrant.store import QdrantVectorStore

__all__ = [
    "DEFAULT_COLLECTION",
    "POINT_ID_NAMESPACE",
    "QdrantHybridRetriever",
    "QdrantVectorStore",
    "point_id",
    "shadow_fields",
    "translate_filter",
]
