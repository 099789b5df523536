"""Ask a question: BM25, k-NN and hybrid retrieval over the configured store, and a filtered search.

Run: python examples/05_indexing.py && python examples/10_retrieving.py
"""

from __future__ import annotations

from typing import Any

import anyio
from _runtime import ExampleConfig, config_from_env, settings

from fastrag.config import open_embedder, open_stores
from fastrag.errors import BackendUnavailableError
from fastrag.filters import field
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever


async def main() -> None:
    config = config_from_env()
    try:
        async with open_stores(settings(config), create=False) as (store, lexical):
            await answer(config, store, lexical)
    except BackendUnavailableError as exc:  # a store that does not exist yet: never "no match"
        raise SystemExit(f"{exc}\nrun examples/05_indexing.py first") from exc


async def answer(config: ExampleConfig, store: Any, lexical: Any) -> None:
    """Ask the question with each retriever, then once more with a metadata filter."""
    if await store.count() == 0:
        raise SystemExit(f"{config.store} is empty: run examples/05_indexing.py first")
    async with open_embedder(config.embedding_model or store.embedding_model) as embedder:
        bm25 = BM25Retriever(store=lexical)
        vector = VectorRetriever(vector_store=store, embedder=embedder)
        hybrid = HybridRetriever([vector, bm25])

        print(f"Q: {config.question}")
        for name, retriever in [("bm25", bm25), ("vector", vector), ("hybrid", hybrid)]:
            docs = await retriever.retrieve(config.question, k=3)
            print(f"\n{name}:")
            for doc in docs:
                print(f"  {doc.rank + 1}. {doc.score:.4f}  {doc.metadata['source_uri']}  {doc.metadata.get('title', '')}")

        # The same question, restricted by metadata: only chunks from the filters page (its title is
        # its first heading). Not source_uri == "filters.md": a source_uri is the file's path relative to
        # the working directory, or absolute outside it, so it is never the bare file name.
        only_filters = field("title") == "Filters"
        docs = await hybrid.retrieve(config.question, k=3, filter=only_filters)
        print("\nhybrid, filter title == Filters:")
        for doc in docs:
            print(f"  {doc.rank + 1}. {doc.metadata['source_uri']}#{doc.metadata['chunk_index']}  "
                  f"branches={ {b: r.rank for b, r in doc.branches.items()} }")


if __name__ == "__main__":
    anyio.run(main)
