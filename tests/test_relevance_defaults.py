"""Issue 25, relevance defaults that never lose: a branch's true matches stay above its non-matches after
fusion; BM25 by Lucene's conventions (repeated query terms counted, English possessives dropped, a new
analysis version); embedders that declare their languages."""

from __future__ import annotations

import math
import random
import sqlite3
import warnings

import numpy as np
import pytest

from fastrag.analysis import ANALYSIS_VERSION, Analyzer
from fastrag.embedding_languages import MODEL_LANGUAGES, UnknownLanguagesWarning
from fastrag.errors import ConfigurationError, InvalidParameterError
from fastrag.ingestion import (
    CachedEmbedder,
    EmbeddingCache,
    Model2VecEmbedder,
    OpenAICompatibleEmbedder,
)
from fastrag.models import Document
from fastrag.protocols import DeclaresLanguages
from fastrag.retrieval import (
    BM25Retriever,
    HybridRetriever,
    VectorRetriever,
    WeightedScoreFusion,
)
from fastrag.retrieval.hybrid import embedder_languages
from fastrag.scoring import bm25_scores, query_term_counts
from fastrag.testing.fakes import PrecomputedEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore, lexical

pytestmark = pytest.mark.anyio


def ranked(pairs: list[tuple[str, float]]) -> list[Document]:
    return [Document(id=i, content=i, metadata={"score": s, "rank": r}) for r, (i, s) in enumerate(pairs)]


# ------------------------------------------------------------------------------------ the fusion floor

# Per normalisation, a BM25 list whose lowest document ("low") normalised to exactly the value of a document
# BM25 did not return, before the floor: min-max maps the lowest to 0; z-score gave the missing the list's
# minimum; DBSF gave 0, which a score more than 3 std below the mean reaches; "none" gave min(0, lowest).
TIE_LISTS = {
    "min_max": [("top", 5.0), ("low", 1.0)],
    "z_score": [("top", 5.0), ("low", 1.0)],
    "dbsf": [(f"top{i}", 10.0) for i in range(20)] + [("low", 0.0)],
    "none": [("top", 0.5), ("low", -0.5)],
}


@pytest.mark.parametrize("normalization", sorted(TIE_LISTS))
def test_a_branch_match_never_normalises_to_the_value_of_a_non_match(normalization: str) -> None:
    # "low" and "other" have the same dense score, "other" ahead in the dense list: the fused order of the
    # two is decided by BM25 alone, where "low" is a match and "other" is not
    results = {"bm25": ranked(TIE_LISTS[normalization]), "vector": ranked([("other", 0.5), ("low", 0.5), ("z", 0.1)])}
    fused = WeightedScoreFusion(normalization=normalization).fuse(results)
    score = {d.id: d.score for d in fused}
    assert score["low"] > score["other"]
    assert [d.id for d in fused].index("low") < [d.id for d in fused].index("other")
    # floor=0 is the classic normalisation, which ties them (the bug): the dense list's order decides
    classic = {d.id: d.score for d in WeightedScoreFusion(normalization=normalization, floor=0).fuse(results)}
    assert classic["low"] == pytest.approx(classic["other"], abs=1e-12)


def test_min_max_floor_maps_the_returned_documents_onto_floor_to_one() -> None:
    fused = WeightedScoreFusion({"bm25": 1.0, "vector": 1e-12}, floor=0.25).fuse(
        {"bm25": ranked([("a", 9.0), ("b", 5.0), ("c", 1.0)]), "vector": ranked([("d", 1.0)])}
    )
    assert {d.id: round(d.score, 9) for d in fused} == {"a": 1.0, "b": 0.625, "c": 0.25, "d": 0.0}


@pytest.mark.parametrize("floor", [-0.1, 1.0, math.nan, "0.2", True])
def test_a_bad_floor_is_refused(floor: object) -> None:
    with pytest.raises(InvalidParameterError, match="floor"):
        WeightedScoreFusion(floor=floor)  # type: ignore[arg-type]


def test_every_normalisation_keeps_matches_above_non_matches_on_random_lists() -> None:
    rng = random.Random(25)
    for _ in range(200):
        n = rng.randint(1, 12)
        scores = [round(rng.uniform(-3, 30), rng.choice([0, 3])) for _ in range(n)]
        if rng.random() < 0.2:
            scores = [scores[0]] * n  # constant lists too
        bm25 = ranked(sorted(((f"m{i}", s) for i, s in enumerate(scores)), key=lambda p: -p[1]))
        for normalization in ("min_max", "z_score", "dbsf", "none"):
            fusion = WeightedScoreFusion({"bm25": 1.0, "vector": 1e-9}, normalization=normalization)
            fused = fusion.fuse({"bm25": bm25, "vector": ranked([("absent", 0.0)])})
            worst_match = min(d.score for d in fused if d.id != "absent")
            assert worst_match > next(d.score for d in fused if d.id == "absent"), (normalization, scores)


async def test_the_default_hybrid_keeps_two_rare_term_hits_on_top() -> None:
    # Issue 25's example: a query whose rare term has two BM25 hits, both relevant, at BM25 ranks 1 and 2.
    # The dense branch (a shipped static model's name, so the default min-max BM25 0.9 / dense 0.1) ranks
    # 39 other documents first and the second hit 40th. Before the floor, the second hit normalised to 0
    # in BM25, as every document BM25 did not match, and fell behind all the dense-only candidates.
    docs = [Document(id="hit-1", content="zyxomab enzyme kinetics"), Document(id="hit-2", content="the zyxomab assay")]
    docs += [Document(id=f"dense-{i:02d}", content=f"unrelated text number {i}") for i in range(39)]
    rng = np.random.default_rng(0)
    query_vector = rng.normal(size=16).astype(np.float32)
    query_vector /= np.linalg.norm(query_vector)
    order = [f"dense-{i:02d}" for i in range(39)] + ["hit-1", "hit-2"]  # dense ranks: hits last
    vectors = {}
    for rank, doc_id in enumerate(order):
        noise = rng.normal(size=16).astype(np.float32)
        noise -= noise.dot(query_vector) * query_vector
        noise /= np.linalg.norm(noise)
        cosine = 0.95 - rank * 0.02
        vectors[doc_id] = cosine * query_vector + math.sqrt(1 - cosine**2) * noise
    by_id = {d.id: d for d in docs}
    embedder = PrecomputedEmbedder("static-minilm-d256", {**{by_id[i].content: v for i, v in vectors.items()},
                                                          "zyxomab": query_vector})
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(docs, embeddings=np.stack([vectors[d.id] for d in docs]))
        dense = await VectorRetriever(vector_store=store, embedder=embedder).retrieve("zyxomab", k=41)
        assert [d.id for d in dense][-2:] == ["hit-1", "hit-2"]
        hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
        assert hybrid.fusion.normalization == "min_max" and hybrid.fusion.floor > 0
        top = await hybrid.retrieve("zyxomab", k=10)
    assert {d.id for d in top[:2]} == {"hit-1", "hit-2"}


# ------------------------------------------------------------------------------------ Lucene's BM25


def test_repeated_query_terms_count_once_per_occurrence_by_hand() -> None:
    # Lucene BM25 (k1 1.2, b 0.75) by hand. Documents: d1 "apple banana" (2 terms), d2 "banana cherry
    # cherry cherry" (4), d3 "cherry" (1); avgdl 7/3. Query "banana banana cherry": qtf(banana) = 2.
    docs = {"d1": ["appl", "banana"], "d2": ["banana", "cherri", "cherri", "cherri"], "d3": ["cherri"]}
    n, avgdl = 3, 7 / 3

    def part(tf: int, length: int) -> float:
        return tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / avgdl))

    idf = lambda df: math.log(1 + (n - df + 0.5) / (df + 0.5))
    expected = {
        "d1": 2 * idf(2) * part(1, 2),
        "d2": 2 * idf(2) * part(1, 4) + idf(2) * part(3, 4),
        "d3": idf(2) * part(1, 1),
    }
    query = Analyzer().analyze("banana banana cherry", for_query=True)
    assert query == ["banana", "banana", "cherri"]
    assert query_term_counts([query]) == {"banana": 2, "cherri": 1}
    assert bm25_scores(docs, query) == pytest.approx(expected, rel=1e-12)


async def test_the_sqlite_store_scores_a_repeated_query_term_per_occurrence() -> None:
    texts = {"d1": "apple banana", "d2": "cherry cherry", "d3": "kiwi"}
    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert([Document(id=i, content=t) for i, t in texts.items()])
        found = await store.search_text("banana banana cherry", k=3)
    analyzer = Analyzer()
    expected = bm25_scores({i: analyzer.analyze(t) for i, t in texts.items()}, analyzer.analyze("banana banana cherry"))
    assert {d.id: d.score for d in found} == pytest.approx(expected, rel=1e-6)
    # banana counted once (fastrag before issue 25): d1 0.907 < d2 1.277; counted twice: d1 1.813, first
    assert [d.id for d in found] == ["d1", "d2"]


async def test_postgres_scores_a_repeated_query_term_per_occurrence(postgres_url: str) -> None:
    import uuid

    from fastrag.vector_store.postgres import PgVectorStore

    texts = {"d1": "apple banana", "d2": "cherry cherry", "d3": "kiwi"}
    table = f"t_{uuid.uuid4().hex[:16]}"
    async with PgVectorStore(postgres_url, table=table) as pg, SQLiteVectorStore(":memory:") as lite:
        for store in (pg, lite):
            await store.upsert([Document(id=i, content=t) for i, t in texts.items()])
        got = await pg.search_text("banana banana cherry", k=3)
        want = await lite.search_text("banana banana cherry", k=3)
    assert [d.id for d in got] == [d.id for d in want] == ["d1", "d2"]
    assert [d.score for d in got] == pytest.approx([d.score for d in want], rel=1e-6)


def test_query_term_counts_across_analyses_take_each_terms_largest_count() -> None:
    assert query_term_counts([["a", "b", "a"], ["a", "c"], []]) == {"a": 2, "b": 1, "c": 1}
    assert query_term_counts([]) == {}


async def test_the_fast_path_matches_the_reference_on_random_collections() -> None:
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    analyzer = Analyzer()
    for trial in range(8):
        texts = {f"d{i}": " ".join(rng.choices(words[: rng.randint(2, 8)], k=rng.randint(1, 12))) for i in range(40)}
        query = " ".join(rng.choices(words, k=rng.randint(1, 7)))
        async with SQLiteVectorStore(":memory:") as store:
            await store.upsert([Document(id=i, content=t) for i, t in texts.items()])
            found = await store.search_text(query, k=40)
        expected = bm25_scores({i: analyzer.analyze(t) for i, t in texts.items()}, analyzer.analyze(query, for_query=True))
        assert {d.id: d.score for d in found} == pytest.approx(expected, rel=1e-5), trial


def test_maxscore_stays_exact_with_query_term_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(25)
    n = 4000
    lengths = rng.integers(1, 60, n + 1).astype(np.float64)
    norms = lexical.BM25_K1 * (1 - lexical.BM25_B + lexical.BM25_B * lengths / lengths.mean())
    lists = []
    for t, share in enumerate((0.9, 0.5, 0.05, 0.005)):
        docs = np.flatnonzero(rng.random(n) < share) + 1
        lists.append(lexical._joined(None, [(docs, rng.integers(1, 5, len(docs)))], norms, f"t{t}"))
    for weights in ([1, 1, 1, 1], [3, 1, 2, 1], [1, 5, 1, 2]):
        everything = lexical.bm25_top(lists, live=None, allowed=None, n_docs=n, size=n + 1, k=10, query_weights=weights)
        with monkeypatch.context() as m:
            m.setattr(lexical, "MAXSCORE_MIN_POSTINGS", 0)
            pruned = lexical.bm25_top(lists, live=None, allowed=None, n_docs=n, size=n + 1, k=10, query_weights=weights)

        def top(rowids: np.ndarray, scores: np.ndarray) -> list[tuple[int, float]]:
            return sorted(((int(r), round(float(s), 9)) for r, s in zip(rowids, scores, strict=True)),
                          key=lambda p: (-p[1], p[0]))[:10]

        assert top(*pruned) == top(*everything), weights


def test_english_possessives_are_dropped() -> None:
    english = Analyzer()
    assert english.analyze("DDC's role in the children’s ward") == ["ddc", "role", "children", "ward"]
    assert english.analyze("it's O'Brien's") == ["o", "brien"]  # "it" is a stopword; O'Brien is no possessive
    assert english.analyze("the boys' DDC'S") == ["boy", "ddc"]
    # in every language (a multilingual store analyses a question in each of its languages: a German
    # analysis keeping "s" would match German documents' "s" that English ones no longer hold)
    assert Analyzer("de").analyze("DDC's") == ["ddc"] and Analyzer(None).analyze("DDC's") == ["ddc"]
    assert Analyzer("tr").analyze("İstanbul'da") == ["istanbul"]  # Turkish drops any suffix, as before


def test_the_analysis_version_names_the_possessive_change() -> None:
    assert ANALYSIS_VERSION == 3
    assert Analyzer().signature.startswith("fastrag-analysis/3 ")


async def test_a_sqlite_store_of_the_old_analysis_is_re_analysed(tmp_path) -> None:
    path = tmp_path / "old.db"
    async with SQLiteVectorStore(path) as store:
        await store.upsert([Document(id="a", content="DDC's protocol"), Document(id="b", content="the s protocol")])
    # as analysis version 2 left it: the signature, and the possessive as a term of its own
    old = Analyzer().signature.replace("fastrag-analysis/3", "fastrag-analysis/2")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'analysis'", (old,))
    async with SQLiteVectorStore(path) as store:
        found = await store.search_text("s", k=5)
        signature = dict(store._conn.execute("SELECT key, value FROM meta"))["analysis"]
    assert signature == Analyzer().signature
    assert [d.id for d in found] == ["b"]  # "DDC's" no longer holds a term "s"


async def test_a_qdrant_collection_of_the_old_analysis_is_refused() -> None:
    pytest.importorskip("qdrant_client")
    from qdrant_client import AsyncQdrantClient

    from fastrag.vector_store.qdrant import QdrantVectorStore

    client = AsyncQdrantClient(location=":memory:")
    try:
        async with QdrantVectorStore(client=client, collection="docs", enable_bm25=True) as store:
            await store.upsert([Document(id="a", content="DDC's protocol")])
        info = await client.get_collection("docs")
        meta = dict(info.config.metadata["fastrag"])
        meta["analysis"] = meta["analysis"].replace("fastrag-analysis/3", "fastrag-analysis/2")
        await client.update_collection("docs", metadata={"fastrag": meta})
        with pytest.raises(ConfigurationError, match="fastrag-analysis/2"):
            async with QdrantVectorStore(client=client, collection="docs", enable_bm25=True) as store:
                await store.search_text("protocol", k=1)
    finally:
        await client.close()


# ------------------------------------------------------------------------------------ embedder languages


def test_built_in_embedders_declare_their_languages() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownLanguagesWarning)
        shipped = Model2VecEmbedder()
        assert isinstance(shipped, DeclaresLanguages) and shipped.languages == frozenset({"en"})
        pytest.importorskip("sentence_transformers")
        from fastrag.ingestion import SentenceTransformerEmbedder

        minilm = SentenceTransformerEmbedder()  # all-MiniLM-L6-v2: English (issue 25: it was unknown)
        assert isinstance(minilm, DeclaresLanguages) and minilm.languages == frozenset({"en"})
        assert embedder_languages(minilm) == frozenset({"en"})
        multilingual = OpenAICompatibleEmbedder("paraphrase-multilingual-MiniLM-L12-v2", base_url="http://127.0.0.1:9/v1")
        assert {"ar", "ko", "ja", "en", "de"} <= multilingual.languages  # type: ignore[operator]
        declared = OpenAICompatibleEmbedder("my-model", base_url="http://127.0.0.1:9/v1", languages=["pt-BR", "de"])
        assert declared.languages == frozenset({"pt", "de"})
    assert MODEL_LANGUAGES["all-MiniLM-L6-v2"] == frozenset({"en"})


def test_an_embedder_of_unknown_languages_warns_at_construction() -> None:
    with pytest.warns(UnknownLanguagesWarning, match="text-embedding-3-small"):
        embedder = OpenAICompatibleEmbedder("text-embedding-3-small", base_url="http://127.0.0.1:9/v1")
    assert embedder.languages is None and embedder_languages(embedder) is None
    with pytest.raises(InvalidParameterError, match="languages"):
        OpenAICompatibleEmbedder("m", base_url="http://127.0.0.1:9/v1", languages="en")
    with pytest.raises(InvalidParameterError, match="languages"):
        OpenAICompatibleEmbedder("m", base_url="http://127.0.0.1:9/v1", languages=["english"])


async def test_a_cached_embedder_keeps_the_wrapped_embedders_languages(tmp_path) -> None:
    async with EmbeddingCache(tmp_path / "cache.db") as cache:
        cached = CachedEmbedder(Model2VecEmbedder(), cache)
        assert cached.languages == frozenset({"en"}) and embedder_languages(cached) == frozenset({"en"})


async def test_minilm_is_left_out_of_a_hybrid_on_arabic_questions() -> None:
    pytest.importorskip("sentence_transformers")
    from fastrag.ingestion import SentenceTransformerEmbedder
    from fastrag.retrieval.hybrid import SkippedBranchWarning

    async with SQLiteVectorStore(":memory:") as store:
        with pytest.warns(SkippedBranchWarning, match="all-MiniLM-L6-v2"):
            retriever = HybridRetriever([
                VectorRetriever(vector_store=store, embedder=SentenceTransformerEmbedder()),
                BM25Retriever(store=store, language="ar"),
            ])
        assert set(retriever.skipped_branches) == {"vector"}
