"""Haystack 2: InMemoryDocumentStore (its default BM25L), InMemoryBM25Retriever +
InMemoryEmbeddingRetriever (precomputed vectors, cosine) + DocumentJoiner(reciprocal_rank_fusion)."""

import time
from importlib.metadata import version

from _bundle import main
from haystack import Document, Pipeline
from haystack.components.joiners import DocumentJoiner
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore


def configs(bundle, k):
    def store(model=None):
        start = time.perf_counter()
        s = InMemoryDocumentStore(embedding_similarity_function="cosine")
        vecs = bundle.vectors(model)[0] if model else None
        s.write_documents([Document(id=i, content=t, embedding=(vecs[j].tolist() if model else None))
                           for j, (i, t) in enumerate(zip(bundle.doc_ids, bundle.doc_texts))])
        return s, time.perf_counter() - start

    def b_bm25():
        s, t = store()
        r = InMemoryBM25Retriever(document_store=s, top_k=k)
        return (lambda i: [d.id for d in r.run(query=bundle.query_texts[i])["documents"]]), t

    yield "bm25", b_bm25
    for model in bundle.models:
        queries = bundle.vectors(model)[1]

        def b_dense(model=model, queries=queries):
            s, t = store(model)
            r = InMemoryEmbeddingRetriever(document_store=s, top_k=k)
            return (lambda i: [d.id for d in r.run(query_embedding=queries[i].tolist())["documents"]]), t

        def b_hybrid(model=model, queries=queries):
            s, t = store(model)
            p = Pipeline()
            p.add_component("bm25", InMemoryBM25Retriever(document_store=s, top_k=k))
            p.add_component("dense", InMemoryEmbeddingRetriever(document_store=s, top_k=k))
            p.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=k))
            p.connect("bm25", "joiner")
            p.connect("dense", "joiner")

            def search(i):
                out = p.run({"bm25": {"query": bundle.query_texts[i]},
                             "dense": {"query_embedding": queries[i].tolist()}})
                return [d.id for d in out["joiner"]["documents"]]

            return search, t

        yield f"dense:{model}", b_dense
        yield f"hybrid:{model}", b_hybrid


if __name__ == "__main__":
    main("Haystack", f"haystack-ai {version('haystack-ai')}", configs)
