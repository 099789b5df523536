"""EmbeddingCache and CachedEmbedder: vectors kept on disk by embedder fingerprint and text, so unchanged text
is never embedded twice; and the ingestion pipeline's use of them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from fastrag.ingestion import CachedEmbedder, EmbeddingCache, IngestionPipeline
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore

pytestmark = pytest.mark.anyio


class CountingEmbedder(HashingEmbedder):
    """A HashingEmbedder that records every text it is asked to embed."""

    def __init__(self, *, fingerprint: str = "hash-v1", **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.fingerprint = fingerprint
        self.seen: list[str] = []

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.seen.extend(texts)
        return await super().embed_documents(texts)


async def test_second_pass_embeds_nothing_and_returns_the_same_vectors(tmp_path: Path) -> None:
    texts = ["alpha beta", "gamma", "alpha beta", "delta"]
    inner = CountingEmbedder()
    async with EmbeddingCache(tmp_path / "cache.db") as cache:
        embedder = CachedEmbedder(inner, cache)
        first = await embedder.embed_documents(texts)
        assert inner.seen == ["alpha beta", "gamma", "delta"]  # each distinct text once
        second = await embedder.embed_documents(texts[::-1])
        assert inner.seen == ["alpha beta", "gamma", "delta"]  # nothing more
        assert embedder.hits == 4 and embedder.misses == 3
    np.testing.assert_array_equal(second[::-1], first)
    np.testing.assert_array_equal(first, await HashingEmbedder().embed_documents(texts))
    # the file persists: a new process (a new cache object) reads the same vectors
    async with EmbeddingCache(tmp_path / "cache.db") as reopened:
        again = CachedEmbedder(CountingEmbedder(), reopened)
        np.testing.assert_array_equal(await again.embed_documents(texts), first)
        assert again.embedder.seen == []


async def test_another_model_or_setting_never_reads_these_vectors(tmp_path: Path) -> None:
    async with EmbeddingCache(tmp_path / "cache.db") as cache:
        await CachedEmbedder(CountingEmbedder(fingerprint="model-a"), cache).embed_documents(["x", "y"])
        other = CountingEmbedder(fingerprint="model-a#dimensions=256")
        await CachedEmbedder(other, cache).embed_documents(["x", "y"])
        assert other.seen == ["x", "y"]
        assert await cache.count("model-a") == 2 and await cache.count() == 4


async def test_queries_are_cached_only_when_asked(tmp_path: Path) -> None:
    async with EmbeddingCache(tmp_path / "cache.db") as cache:
        embedder = CachedEmbedder(CountingEmbedder(), cache)
        await embedder.embed_query("what?")
        assert await cache.count() == 0
        cached = CachedEmbedder(CountingEmbedder(), cache, cache_queries=True)
        q = await cached.embed_query("what?")
        np.testing.assert_array_equal(await cached.embed_query("what?"), q)
        assert cached.misses == 1 and cached.hits == 1


async def test_empty_input_passes_through(tmp_path: Path) -> None:
    async with EmbeddingCache(":memory:") as cache:
        out = await CachedEmbedder(HashingEmbedder(dimension=16), cache).embed_documents([])
    assert out.shape == (0, 16) and out.dtype == np.float32


async def test_pipeline_reindexing_a_changed_file_embeds_only_its_new_chunks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    doc = tmp_path / "notes.txt"
    paragraphs = [f"Paragraph {i} talks about topic {i} in some detail." * 3 for i in range(6)]
    doc.write_text("\n\n".join(paragraphs), encoding="utf-8")
    inner = CountingEmbedder()
    from fastrag.ingestion import Chunker

    chunker = Chunker(chunk_size=200, chunk_overlap=0)
    async with EmbeddingCache(tmp_path / "cache.db") as cache, InMemoryStore() as store:
        pipeline = IngestionPipeline(embedder=inner, vector_store=store, chunker=chunker, embedding_cache=cache)
        first = await pipeline.run([doc])
        embedded_first = len(inner.seen)
        assert first.chunks_written == embedded_first > 2
        doc.write_text("\n\n".join([*paragraphs, "A new closing paragraph."]), encoding="utf-8")
        await pipeline.run([doc])
        new = inner.seen[embedded_first:]
        assert new and len(new) < embedded_first  # the unchanged chunks came from the cache
        assert all("new closing" in t for t in new)
    # a fresh store (re-indexing elsewhere) costs nothing at all
    async with EmbeddingCache(tmp_path / "cache.db") as cache, InMemoryStore() as fresh:
        again = CountingEmbedder()
        report = await IngestionPipeline(embedder=again, vector_store=fresh, chunker=chunker, embedding_cache=cache).run([doc])
        assert report.chunks_written > 0 and again.seen == []


async def test_precomputed_embedder_answers_from_its_table_and_falls_back_or_refuses() -> None:
    from fastrag.testing.fakes import PrecomputedEmbedder

    vectors = await HashingEmbedder().embed_documents(["a b", "c"])
    table = PrecomputedEmbedder("m", {"a b": vectors[0], "c": vectors[1]})
    np.testing.assert_array_equal(await table.embed_documents(["c", "a b"]), vectors[::-1])
    np.testing.assert_array_equal(await table.embed_query("c"), vectors[1])
    with pytest.raises(KeyError):
        await table.embed_query("unknown")
    fallback = CountingEmbedder()
    with_fallback = PrecomputedEmbedder("m", {"a b": vectors[0]}, fallback=fallback)
    out = await with_fallback.embed_documents(["a b", "zzz"])
    assert fallback.seen == ["zzz"] and with_fallback.misses == 1 and out.shape == (2, 64)
