"""The small real knowledge base the framework adapters' tests search (tests/test_integrations_*.py): eight
passages about retrieval in a SQLite store, embedded with the static model shipped with fastrag."""

from __future__ import annotations

from pathlib import Path

import anyio

from fastrag import Document, KnowledgeBase

QUESTION = "how does hybrid search fuse BM25 and dense vector scores?"

PASSAGES = {
    "bm25": ("BM25", "en", 2009, "BM25 ranks documents by term frequency, inverse document frequency and length."),
    "dense": ("Dense", "en", 2020, "Dense retrieval embeds questions and documents as vectors and ranks by cosine."),
    "fusion": ("Fusion", "en", 2021, "Hybrid search fuses the BM25 list and the dense list with min-max scores."),
    "rrf": ("RRF", "en", 2009, "Reciprocal rank fusion adds one over rank constant plus rank for every list."),
    "rerank": ("Rerank", "de", 2022, "Ein Reranker liest die fusionierten Kandidaten und ordnet sie neu."),
    "filters": ("Filters", "en", 2023, "Metadata filters keep documents whose fields match, on every store."),
    "chunks": ("Chunks", "en", 2019, "Documents are cut into chunks; each chunk is indexed for BM25 and vectors."),
    "tenants": ("Tenants", "fr", 2024, "Les espaces de locataires limitent chaque recherche aux documents d'un usager."),
}


def documents() -> list[Document]:
    return [
        Document(id=name, content=body,
                 metadata={"title": title, "lang": lang, "year": year, "source_uri": f"docs/{name}.md"})
        for name, (title, lang, year, body) in PASSAGES.items()
    ]  # fmt: skip


def build(root: Path) -> str:
    """Write the passages into a new SQLite knowledge base under ``root``; return its store URL."""
    url = f"sqlite:///{root / 'kb.db'}"

    async def write() -> None:
        async with KnowledgeBase(url) as kb:
            await kb.add_documents(documents())

    anyio.run(write)
    return url
