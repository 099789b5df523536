"""Index the project's docs/ folder into the configured store (the embedded SQLite store by default).

Run: python examples/05_indexing.py        (settings: see examples/_runtime.py)
Running it twice writes nothing the second time: unchanged files are skipped.
"""

from __future__ import annotations

import anyio
from _runtime import config_from_env, settings

from fastrag.config import open_embedder, open_stores
from fastrag.ingestion import Chunker, IngestionPipeline


async def main() -> None:
    config = config_from_env()
    async with open_embedder(config.embedding_model) as embedder:
        async with open_stores(settings(config), embedding_model=embedder.name) as (store, lexical):
            pipeline = IngestionPipeline(embedder=embedder, vector_store=store, lexical_store=lexical,
                                         chunker=Chunker(chunk_size=800, chunk_overlap=80))
            report = await pipeline.run([config.docs_dir], prune=True)
            print(f"{report.files_indexed} files indexed ({report.chunks_written} chunks), "
                  f"{report.files_unchanged} unchanged, {report.files_pruned} pruned; "
                  f"{await store.count()} chunks in {config.store}")


if __name__ == "__main__":
    anyio.run(main)
