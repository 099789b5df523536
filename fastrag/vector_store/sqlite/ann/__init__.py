"""Approximate k-NN for the embedded SQLite store, from faiss: an HNSW graph, or a PQ fast scan re-scored.

Two index types with one API (``build``, ``add``, ``remove``, ``search``, ``save``, ``load``, ``len``,
``max_key``, ``keys``, ``dead_fraction``, ``memory_mapped``, ``stamp``), so the store can hold either:
:class:`HNSWIndex` (:mod:`fastrag.vector_store.sqlite.ann.hnsw`; sub-millisecond on real text vectors, a poor
fit for random ones; the choice of faiss is argued there) and :class:`PQFastScanIndex`
(:mod:`fastrag.vector_store.sqlite.ann.pq`; a linear scan of 4-bit codes whose best candidates are re-scored
exactly against the store's own float vectors). Both ``search`` methods take ``vectors=``: the fast scan needs
it, the graph ignores it. Both need the ``ann`` extra (``pip install "fastrag-retrieval[ann]"``); faiss is
imported on first use, never by ``import fastrag``. Their files (atomic, stamped saves; what crashed saves
leave) are :mod:`fastrag.vector_store.sqlite.ann.files`; how the SQLite store keeps its index over time
(which file it trusts, a full disk) is :mod:`fastrag.vector_store.sqlite.ann.keeper`.
"""

from __future__ import annotations

from fastrag.vector_store.sqlite.ann.hnsw import (
    DEFAULT_EF_CONSTRUCTION,
    DEFAULT_EF_SEARCH,
    DEFAULT_EXACT_ROWS_PER_CANDIDATE,
    DEFAULT_M,
    HNSWIndex,
)
from fastrag.vector_store.sqlite.ann.pq import (
    DEFAULT_CANDIDATE_K,
    DEFAULT_EXACT_SHARE,
    DEFAULT_TRAINING_ROWS,
    PQFastScanIndex,
)

__all__ = [
    "DEFAULT_CANDIDATE_K",
    "DEFAULT_EF_CONSTRUCTION",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_ROWS_PER_CANDIDATE",
    "DEFAULT_EXACT_SHARE",
    "DEFAULT_M",
    "DEFAULT_TRAINING_ROWS",
    "HNSWIndex",
    "PQFastScanIndex",
]
