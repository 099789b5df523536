"""LangChain: BM25Retriever (rank_bm25, its default whitespace tokenisation), InMemoryVectorStore over the
precomputed vectors, EnsembleRetriever (weighted RRF, c=60, weights 0.5/0.5: its defaults)."""

import time
from importlib.metadata import version

from _bundle import main
from langchain.retrievers import EnsembleRetriever
from langchain_community.retrievers import BM25Retriever
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore


class Precomputed(Embeddings):
    def __init__(self, table):
        self.table = table

    def embed_documents(self, texts):
        return [self.table[t] for t in texts]

    def embed_query(self, text):
        return self.table[text]


def configs(bundle, k):
    docs = [Document(page_content=t, metadata={"id": i}) for i, t in zip(bundle.doc_ids, bundle.doc_texts)]

    def bm25():
        start = time.perf_counter()
        r = BM25Retriever.from_documents(docs, k=k)
        return r, time.perf_counter() - start

    def dense(model):
        corpus, queries = bundle.vectors(model)
        table = {t: v.tolist() for t, v in zip(bundle.doc_texts, corpus)}
        table.update({t: v.tolist() for t, v in zip(bundle.query_texts, queries)})
        start = time.perf_counter()
        store = InMemoryVectorStore(embedding=Precomputed(table))
        store.add_documents(docs, ids=bundle.doc_ids)
        return store.as_retriever(search_kwargs={"k": k}), time.perf_counter() - start

    def searcher(retriever):
        return lambda i: [d.metadata["id"] for d in retriever.invoke(bundle.query_texts[i])]

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
            return searcher(EnsembleRetriever(retrievers=[b, d], weights=[0.5, 0.5])), s1 + s2

        yield f"dense:{model}", b_dense
        yield f"hybrid:{model}", b_hybrid


if __name__ == "__main__":
    main("LangChain", f"langchain {version('langchain')}, langchain-community {version('langchain-community')}", configs)
