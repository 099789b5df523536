"""LlamaIndex: BM25Retriever (bm25s + English stemmer, its defaults), VectorStoreIndex over nodes carrying
the precomputed vectors, QueryFusionRetriever(mode="reciprocal_rerank", num_queries=1: no LLM rewriting)."""

import time
from importlib.metadata import version

import Stemmer
from _bundle import main
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import TextNode
from llama_index.retrievers.bm25 import BM25Retriever


class Precomputed(BaseEmbedding):
    table: dict = {}

    def _get_query_embedding(self, query):
        return self.table[query]

    async def _aget_query_embedding(self, query):
        return self.table[query]

    def _get_text_embedding(self, text):
        return self.table[text]


def configs(bundle, k):
    def nodes(model=None):
        vecs = bundle.vectors(model)[0] if model else None
        return [TextNode(id_=i, text=t, embedding=(vecs[j].tolist() if model else None))
                for j, (i, t) in enumerate(zip(bundle.doc_ids, bundle.doc_texts))]

    def bm25():
        start = time.perf_counter()
        r = BM25Retriever.from_defaults(nodes=nodes(), similarity_top_k=k, stemmer=Stemmer.Stemmer("english"),
                                        language="english")
        return r, time.perf_counter() - start

    def dense(model):
        corpus, queries = bundle.vectors(model)
        table = {t: v.tolist() for t, v in zip(bundle.query_texts, queries)}
        start = time.perf_counter()
        embed = Precomputed(table=table, model_name=model)
        index = VectorStoreIndex(nodes(model), embed_model=embed, show_progress=False)
        return index.as_retriever(similarity_top_k=k), time.perf_counter() - start

    def searcher(retriever):
        return lambda i: [n.node.node_id for n in retriever.retrieve(bundle.query_texts[i])]

    def b_bm25():
        r, s = bm25()
        return searcher(r), s

    yield "bm25", b_bm25
    for model in bundle.models:
        def b_dense(model=model):
            r, s = dense(model)
            return searcher(r), s

        def b_hybrid(model=model):
            (b, s1), (d, s2) = bm25(), dense(model)
            fusion = QueryFusionRetriever([d, b], similarity_top_k=k, num_queries=1, mode="reciprocal_rerank",
                                          use_async=False, llm=MockLLM(), verbose=False)
            return searcher(fusion), s1 + s2

        yield f"dense:{model}", b_dense
        yield f"hybrid:{model}", b_hybrid


if __name__ == "__main__":
    main("LlamaIndex", f"llama-index-core {version('llama-index-core')}, "
         f"llama-index-retrievers-bm25 {version('llama-index-retrievers-bm25')}", configs)
