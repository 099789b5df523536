"""Rerankers: re-score a short list of candidates against the question (the second stage of retrieval).

* :class:`EmbedderReranker`: bi-encoder cosine with any :class:`~fastrag.protocols.Embedder`; no extra.
* :class:`CrossEncoderReranker`: a sentence-transformers cross-encoder from a local folder (extra
  ``cross-encoder``).
* :class:`CohereReranker`: Cohere's rerank API (extra ``cohere``).

Each implements :class:`~fastrag.protocols.Reranker`; wrap a retriever with
:class:`~fastrag.retrieval.reranking.RerankingRetriever` to use one. Importing this package loads no SDK
and no model.
"""

from fastrag.rerankers.cohere import CohereReranker
from fastrag.rerankers.cross_encoder import CrossEncoderReranker
from fastrag.rerankers.embedding import EmbedderReranker

__all__ = ["CohereReranker", "CrossEncoderReranker", "EmbedderReranker"]
