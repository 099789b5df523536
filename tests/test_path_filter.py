"""PathFilterRetriever: include/exclude globs and a regex on source_uri, applied after an over-fetch."""

from __future__ import annotations

import pytest

from fastrag.errors import InvalidParameterError
from fastrag.filters import field
from fastrag.models import Document
from fastrag.retrieval import BM25Retriever, PathFilterRetriever
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio


class RecordingRetriever:
    """Returns its documents best first (scores 100, 99, ...), at most ``k``; records every call."""

    name = "recording"

    def __init__(self, uris: list[str | None]) -> None:
        self.uris = uris
        self.calls: list[dict] = []

    async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
        self.calls.append({"query": query, "k": k, "filter": filter})
        docs = []
        for rank, uri in enumerate(self.uris[:k]):
            metadata = {"score": 100.0 - rank, "rank": rank}
            if uri is not None:
                metadata["source_uri"] = uri
            docs.append(Document(id=f"d{rank}", content=f"text {rank}", metadata=metadata))
        return docs


URIS = [
    "README.md",
    "docs/guide.md",
    "docs/api/reference.md",
    "docs/drafts/notes.txt",
    "src/app.py",
    "src/docs/helper.py",
    "tests/test_app.py",
    "notes.txt",
]


async def kept(uris=URIS, **rules) -> list[str]:
    retriever = PathFilterRetriever(RecordingRetriever(list(uris)), **rules)
    return [d.source_uri for d in await retriever.retrieve("q", k=len(uris))]


# ------------------------------------------------------------------------------------------- semantics


async def test_a_pattern_without_a_slash_matches_the_file_name_in_any_folder() -> None:
    assert await kept(include_glob="*.md") == ["README.md", "docs/guide.md", "docs/api/reference.md"]


async def test_double_star_crosses_folders_and_is_anchored_at_the_start() -> None:
    # "src/docs/helper.py" has a "docs" folder too, but not at the start
    assert await kept(include_glob="docs/**") == ["docs/guide.md", "docs/api/reference.md", "docs/drafts/notes.txt"]


async def test_single_star_with_a_slash_stays_in_one_folder() -> None:
    assert await kept(include_glob="docs/*.md") == ["docs/guide.md"]


async def test_braces_alternate() -> None:
    assert await kept(include_glob="{src,tests}/**/*.py") == ["src/app.py", "src/docs/helper.py", "tests/test_app.py"]
    assert await kept(include_glob="*.{txt,py}") == [
        "docs/drafts/notes.txt", "src/app.py", "src/docs/helper.py", "tests/test_app.py", "notes.txt"]


async def test_several_include_patterns_are_or_ed() -> None:
    assert await kept(include_glob=["README.md", "tests/**"]) == ["README.md", "tests/test_app.py"]


async def test_exclude_drops_matches_and_wins_over_include() -> None:
    assert await kept(exclude_glob="**/drafts/**") == [u for u in URIS if u != "docs/drafts/notes.txt"]
    assert await kept(include_glob="docs/**", exclude_glob=["**/drafts/**", "*.md"]) == []
    assert await kept(include_glob="docs/**", exclude_glob="docs/api/**") == ["docs/guide.md", "docs/drafts/notes.txt"]


async def test_path_filter_is_a_regex_searched_anywhere_in_the_uri() -> None:
    assert await kept(path_filter="helper|test_") == ["src/docs/helper.py", "tests/test_app.py"]
    assert await kept(path_filter=r"^docs/") == ["docs/guide.md", "docs/api/reference.md", "docs/drafts/notes.txt"]
    assert await kept(path_filter=r"\.md$", exclude_glob="README.md") == ["docs/guide.md", "docs/api/reference.md"]


async def test_all_rules_must_pass() -> None:
    assert await kept(include_glob="**/*.md", exclude_glob="docs/api/**", path_filter="guide|README") == [
        "README.md", "docs/guide.md"]


async def test_documents_without_source_uri_fail_include_rules_but_pass_exclude_only() -> None:
    uris = ["a.md", None, "b.txt"]
    assert await kept(uris, include_glob="*") == ["a.md", "b.txt"]
    assert await kept(uris, path_filter=".") == ["a.md", "b.txt"]
    retriever = PathFilterRetriever(RecordingRetriever(uris), exclude_glob="*.txt")
    assert [d.id for d in await retriever.retrieve("q", k=3)] == ["d0", "d1"]


async def test_without_rules_results_pass_through_unchanged() -> None:
    inner = RecordingRetriever(URIS)
    docs = await PathFilterRetriever(inner).retrieve("q", k=3)
    assert [d.source_uri for d in docs] == URIS[:3]
    assert inner.calls[0]["k"] == 3


# ---------------------------------------------------------------------------------------- over-fetch


@pytest.mark.parametrize(
    ("fetch_k", "k", "asked"),
    [(100, 5, 100), (100, 10, 100), (100, 20, 200), (7, 1, 10), (30, 2, 30), (1, 3, 30)],
)
async def test_the_inner_retriever_is_asked_for_max_fetch_k_and_k_times_10(fetch_k: int, k: int, asked: int) -> None:
    inner = RecordingRetriever(URIS)
    await PathFilterRetriever(inner, include_glob="*.md", fetch_k=fetch_k).retrieve("q", k=k)
    assert [c["k"] for c in inner.calls] == [asked]


async def test_query_and_filter_are_passed_through() -> None:
    inner = RecordingRetriever(URIS)
    metadata_filter = field("lang") == "en"
    await PathFilterRetriever(inner, include_glob="*.md").retrieve("where is the guide?", k=2, filter=metadata_filter)
    assert inner.calls[0]["query"] == "where is the guide?"
    assert inner.calls[0]["filter"] is metadata_filter


async def test_a_match_ranked_90th_is_still_returned() -> None:
    uris = [f"src/module_{i}.py" for i in range(89)] + ["docs/only-match.md"] + [f"src/late_{i}.py" for i in range(30)]
    inner = RecordingRetriever(uris)
    docs = await PathFilterRetriever(inner, include_glob="docs/**").retrieve("q", k=5)
    assert [d.source_uri for d in docs] == ["docs/only-match.md"]
    assert docs[0].id == "d89"
    assert docs[0].score == 100.0 - 89  # the inner retriever's score, kept
    assert docs[0].rank == 0


async def test_ranks_are_restamped_and_scores_kept_and_k_is_the_cap() -> None:
    docs = await PathFilterRetriever(RecordingRetriever(URIS), include_glob="*.py").retrieve("q", k=2)
    # the .py files are at inner positions 4, 5, 6 (scores 96, 95, 94); k=2 keeps the first two
    assert [(d.source_uri, d.rank, d.score) for d in docs] == [("src/app.py", 0, 96.0), ("src/docs/helper.py", 1, 95.0)]


async def test_the_inner_documents_are_not_mutated() -> None:
    class Fixed:
        def __init__(self, docs):
            self.docs = docs

        async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
            return self.docs

    original = Document(id="x", content="t", metadata={"source_uri": "b.md", "score": 3.0, "rank": 7})
    docs = await PathFilterRetriever(Fixed([original]), include_glob="*.md").retrieve("q", k=1)
    assert docs[0].rank == 0 and docs[0].score == 3.0
    assert original.rank == 7


# -------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("regex", ["(", "[a-", "*.md", "a{2,1}"])
async def test_an_invalid_regex_fails_at_construction(regex: str) -> None:
    inner = RecordingRetriever(URIS)
    with pytest.raises(InvalidParameterError, match="path_filter") as info:
        PathFilterRetriever(inner, path_filter=regex)
    assert isinstance(info.value, ValueError)
    assert inner.calls == []  # never falls back to a search without the rule


@pytest.mark.parametrize(
    "rules",
    [{"include_glob": ""}, {"exclude_glob": [""]}, {"include_glob": ["*.md", 3]}, {"fetch_k": 0}, {"fetch_k": -1}],
)
async def test_bad_rules_are_rejected(rules: dict) -> None:
    with pytest.raises(InvalidParameterError):
        PathFilterRetriever(RecordingRetriever(URIS), **rules)


@pytest.mark.parametrize("k", [0, -1, True, 2.0])
async def test_bad_k_is_rejected_before_any_search(k) -> None:
    inner = RecordingRetriever(URIS)
    with pytest.raises(InvalidParameterError):
        await PathFilterRetriever(inner, include_glob="*.md").retrieve("q", k=k)
    assert inner.calls == []


# ------------------------------------------------------------------------------ over a real SQLite store


async def test_metadata_filter_and_glob_find_the_lowest_scored_match_in_sqlite() -> None:
    """30 documents mention pelicans; the one under keep/ in English has the lowest BM25 score of all."""
    docs = []
    for i in range(28):  # short, pelican three times: high BM25
        docs.append(Document(id=f"n{i:02}", content="pelican pelican pelican",
                             metadata={"source_uri": f"notes/n{i:02}.md", "lang": "en"}))
    # under keep/ but German: shares the glob, fails the metadata filter; it outscores the target
    docs.append(Document(id="de", content="pelican pelican pelican",
                         metadata={"source_uri": "keep/de.md", "lang": "de"}))
    filler = " ".join(f"word{j}" for j in range(60))
    docs.append(Document(id="target", content=f"pelican {filler}",  # once, in a long document: lowest BM25
                         metadata={"source_uri": "keep/target.md", "lang": "en"}))

    async with SQLiteVectorStore(":memory:") as store:
        await store.upsert(docs)
        bm25 = BM25Retriever(store=store)
        everything = await bm25.retrieve("pelican", k=30)
        assert len(everything) == 30 and everything[-1].id == "target"  # the premise: it ranks last

        retriever = PathFilterRetriever(bm25, include_glob="keep/**")
        found = await retriever.retrieve("pelican", k=3, filter=field("lang") == "en")
        assert [d.id for d in found] == ["target"]
        assert found[0].rank == 0
        assert found[0].score == pytest.approx(everything[-1].score)

        # without the metadata filter the German document under keep/ comes first
        found = await retriever.retrieve("pelican", k=3)
        assert [d.id for d in found] == ["de", "target"]


# --------------------------------------------------------------- a regex that backtracks (issue 26, point 7)

STUCK = "a" * 30 + ".md"  # a path of 30 `a`, then a tail the pattern cannot end on
BACKTRACKS = "(a|a)+$"  # backtracks catastrophically in the regex module too: 2**30 ways to read the a's


class Fixed:
    """Returns its documents, best first, whatever the call."""

    name = "fixed"

    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs

    async def retrieve(self, query, *, k=10, filter=None):  # noqa: A002
        return self.docs[:k]


def _paths(*uris: str) -> list[Document]:
    return [Document(id=uri, content="text", metadata={"source_uri": uri}) for uri in uris]


@pytest.mark.timeout(60)  # with Python's re, the issue's pattern ran for minutes on this path
async def test_the_issues_pattern_over_a_path_of_30_a_answers_without_backtracking() -> None:
    retriever = PathFilterRetriever(Fixed(_paths(STUCK, "notes/aaaa")), path_filter="(a+)+$")
    assert [d.id for d in await retriever.retrieve("q", k=5)] == ["notes/aaaa"]


@pytest.mark.timeout(60)
async def test_a_pattern_that_backtracks_catastrophically_raises_a_typed_error_at_its_time_limit() -> None:
    from fastrag.errors import RegexTimeoutError

    retriever = PathFilterRetriever(Fixed(_paths("notes/b.md", STUCK)), path_filter=BACKTRACKS, path_filter_timeout=0.2)
    with pytest.raises(RegexTimeoutError, match="path_filter_timeout") as info:
        await retriever.retrieve("q", k=5)
    error = info.value
    assert isinstance(error, InvalidParameterError)  # a bad argument: never retried, never "no match"
    assert (error.pattern, error.timeout, error.text) == (BACKTRACKS, 0.2, STUCK)
    with pytest.raises(RegexTimeoutError):  # raised by retrieve_result too, as every invalid argument is
        await retriever.retrieve_result("q", k=5)
    with pytest.raises(RegexTimeoutError):  # the public check has the same limit
        retriever.accepts(STUCK)
    assert retriever.accepts("notes/b.md") is False


@pytest.mark.timeout(60)
async def test_branch_timeout_stops_a_path_filter_branch_stuck_in_its_regex_and_the_loop_keeps_running() -> None:
    import anyio

    from fastrag.errors import RetrievalTimeoutError
    from fastrag.retrieval import HybridRetriever

    docs = _paths(STUCK, "notes/b.md")
    stuck = PathFilterRetriever(Fixed(docs), path_filter=BACKTRACKS, path_filter_timeout=3.0)
    hybrid = HybridRetriever({"paths": stuck, "plain": Fixed(docs)}, branch_timeout=0.3, on_branch_error="partial")
    ticks = 0

    async def tick() -> None:  # another task on the same event loop
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        result = await hybrid.retrieve_result("q", k=2)
        tg.cancel_scope.cancel()
    # the branch deadline fired (a RetrievalTimeoutError, not the regex's own limit 3 s later), the other
    # branch's results came back, and the loop ran other tasks while the regex was matching
    assert result.partial and isinstance(result.failed_branches["paths"], RetrievalTimeoutError)
    assert {d.id for d in result.documents} == {STUCK, "notes/b.md"}
    assert ticks > 0


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), True, "1"])
async def test_a_bad_path_filter_timeout_is_refused_when_built(timeout) -> None:
    with pytest.raises(InvalidParameterError, match="path_filter_timeout"):
        PathFilterRetriever(Fixed([]), path_filter="a", path_filter_timeout=timeout)


@pytest.mark.timeout(120)
def test_cli_search_with_a_backtracking_path_filter_exits_1_naming_the_limit(tmp_path, monkeypatch) -> None:
    from click.testing import CliRunner

    from fastrag.cli import main

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / STUCK).write_text("solar power for the cabin\n", encoding="utf-8")
    (tmp_path / "docs" / "b.md").write_text("solar power for the barn\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for name in [n for n in __import__("os").environ if n.startswith("FASTRAG_")]:
        monkeypatch.delenv(name)
    runner = CliRunner()
    assert runner.invoke(main, ["index", "docs"], catch_exceptions=False).exit_code == 0
    found = runner.invoke(main, ["search", "solar power", "--mode", "keyword", "--path-filter", "(a+)+$"],
                          catch_exceptions=False)  # fmt: skip
    assert found.exit_code == 0, found.stderr
    assert "No documents matched." in found.stdout  # neither path ends in a run of a
    stuck = runner.invoke(main, ["search", "solar power", "--mode", "keyword", "--path-filter", BACKTRACKS],
                          catch_exceptions=False)  # fmt: skip
    assert stuck.exit_code == 1, stuck.stdout
    assert "path_filter '(a|a)+$' ran past its time limit of 1 s" in stuck.stderr
    assert "No documents matched" not in stuck.stdout
