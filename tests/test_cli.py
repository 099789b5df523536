"""The ``fastrag`` command line: index, search, eval; exit codes and messages as docs/cli.md states them.

Most tests call the click command in-process (``CliRunner``, exceptions not caught, so a crash is a failure
and never passes for "exit 1"); a few run ``python -m fastrag.cli`` as a real process to check what a shell
sees. Every test works in its own folder, with no FASTRAG_* variable inherited from the environment.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fastrag.cli import main

_NO_FASTRAG_ENV = {"FASTRAG_STORE": None, "FASTRAG_MODE": None, "FASTRAG_EMBEDDING_MODEL": None, "FASTRAG_CONFIG": None,
                   "FASTRAG_LEXICAL_STORE": None, "FASTRAG_LLM_BASE_URL": None, "FASTRAG_LLM_MODEL": None,
                   "FASTRAG_LLM_API_KEY": None, "FASTRAG_MIN_SCORE": None, "FASTRAG_MIN_RELATIVE_SCORE": None,
                   "FASTRAG_MIN_VECTOR_SCORE": None, "FASTRAG_MIN_KEYWORD_SCORE": None}

# A small tree: every file says "Field report", and each has words no other file has.
FILES = {
    "notes/pelican.md": "# Pelican\n\nField report: pelicans scoop fish with a throat pouch.\n",
    "notes/sub/zebra.txt": "Field report: zebras graze on the savanna grassland.\n",
    "notes/volcano.html": (
        "<html><head><title>Volcano</title></head>"
        "<body><p>Field report: volcanoes erupt molten lava.</p></body></html>\n"
    ),
    "guides/deep/pelican-care.md": "# Pelican care\n\nField report: feed a rescued bird fresh sardines twice a day.\n",
}
ALL_URIS = set(FILES)
DEFAULT_STORE = "sqlite:///.fastrag/fastrag.db"


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(body, encoding="utf-8")


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run the command in-process in the current working directory."""
    return CliRunner().invoke(main, list(args), env={**_NO_FASTRAG_ENV, **(env or {})}, catch_exceptions=False)


def run_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m fastrag.cli`` as a separate process, as a shell would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    return subprocess.run(
        [sys.executable, "-m", "fastrag.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def search_json(*args: str, env: dict[str, str] | None = None) -> dict:
    result = cli("search", *args, "--json", env=env)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def uris(payload: dict) -> list[str]:
    return [d["metadata"]["source_uri"] for d in payload["documents"]]


@pytest.fixture(scope="module")
def indexed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding FILES and the default store, indexed once for the read-only tests."""
    root = tmp_path_factory.mktemp("indexed")
    write_files(root, FILES)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        result = cli("index", "notes", "guides")
    assert result.exit_code == 0, result.stderr
    return root


@pytest.fixture
def in_index(indexed_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(indexed_dir)
    return indexed_dir


# ---------------------------------------------------------------------------------------------- index


def test_a_small_chunk_size_alone_gets_a_fitting_overlap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_files(tmp_path, {"long.txt": "word " * 200})
    result = cli("index", "long.txt", "--chunk-size", "50")
    assert result.exit_code == 0, result.stderr
    assert "(" in result.stdout and "chunks)" in result.stdout
    bad = cli("index", "long.txt", "--chunk-size", "50", "--chunk-overlap", "60")  # an explicit overlap is checked
    assert bad.exit_code == 1 and "chunk_overlap" in bad.stderr


def test_index_reports_files_and_chunks_and_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_files(tmp_path, FILES)
    monkeypatch.chdir(tmp_path)
    result = cli("index", "notes", "guides")
    assert result.exit_code == 0, result.stderr
    # four short files, one chunk each, into the default store under the working directory
    assert "indexed 4 files (4 chunks)" in result.stdout
    assert DEFAULT_STORE in result.stdout
    assert (tmp_path / ".fastrag" / "fastrag.db").is_file()


def test_reindexing_unchanged_files_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_files(tmp_path, FILES)
    monkeypatch.chdir(tmp_path)
    assert cli("index", "notes", "guides").exit_code == 0
    again = cli("index", "notes", "guides")
    assert again.exit_code == 0, again.stderr
    assert "indexed 0 files (0 chunks), 4 unchanged" in again.stdout
    assert "the store holds 4 chunks" in again.stdout


def test_reindexing_a_changed_file_replaces_it_and_prune_drops_a_deleted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_files(tmp_path, FILES)
    monkeypatch.chdir(tmp_path)
    assert cli("index", "notes").exit_code == 0
    (tmp_path / "notes/sub/zebra.txt").write_text("Field report: giraffes browse acacia trees.\n", encoding="utf-8")
    (tmp_path / "notes/volcano.html").unlink()

    result = cli("index", "notes", "--prune")
    assert result.exit_code == 0, result.stderr
    assert "indexed 1 files" in result.stdout and "1 unchanged" in result.stdout and "1 pruned" in result.stdout
    assert "the store holds 2 chunks" in result.stdout

    assert uris(search_json("acacia", "--mode", "keyword")) == ["notes/sub/zebra.txt"]
    assert search_json("savanna", "--mode", "keyword")["documents"] == []  # the old text is gone
    assert search_json("lava", "--mode", "keyword")["documents"] == []  # the deleted file is gone


def test_a_file_that_is_not_utf8_fails_the_run_but_the_others_are_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_files(tmp_path, {"mixed/good.md": "# Good\n\nAlbatrosses glide over the ocean.\n",
                           "mixed/bad.txt": b"\xff\xfe\xfa not utf-8 albatross\n"})
    monkeypatch.chdir(tmp_path)
    result = cli("index", "mixed")
    assert result.exit_code == 1
    assert "bad.txt" in result.stderr and "UTF-8" in result.stderr
    assert "indexed 1 files" in result.stdout and "1 failed" in result.stdout
    assert result.stderr.count("bad.txt") == 1  # reported once, not again by a logging fallback
    assert uris(search_json("albatross", "--mode", "keyword")) == ["mixed/good.md"]


def test_index_names_each_skipped_file_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 16.7: `fastrag index data.csv` used to say "1 skipped" and nothing else
    write_files(tmp_path, {"data.csv": "a,b\n1,2\n", "mixed/empty.md": "", "mixed/ok.md": "# OK\n\nfine text\n"})
    monkeypatch.chdir(tmp_path)
    result = cli("index", "data.csv", "mixed")
    assert result.exit_code == 0, result.stderr
    assert "indexed 1 files (1 chunks), 0 unchanged, 2 skipped" in result.stdout  # the empty file is not "unchanged"
    assert "skipped data.csv: unsupported file type '.csv'" in result.stdout
    assert "skipped mixed/empty.md: no text to index (empty)" in result.stdout


def test_index_lists_the_first_skipped_files_and_verbose_lists_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_files(tmp_path, {f"many/f{i:02d}.png": b"png" for i in range(25)})
    monkeypatch.chdir(tmp_path)
    short = cli("index", "many")
    assert short.stdout.count("skipped many/") == 20 and "... and 5 more skipped (--verbose names them all)" in short.stdout
    full = cli("index", "many", "--verbose")
    assert full.stdout.count("skipped many/") == 25 and "more skipped" not in full.stdout


def test_index_hints_that_deleted_files_stay_searchable_until_prune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_files(tmp_path, FILES)
    monkeypatch.chdir(tmp_path)
    assert cli("index", "notes").exit_code == 0
    (tmp_path / "notes/volcano.html").unlink()
    result = cli("index", "notes")
    assert "note: 1 indexed file under these paths is gone from disk" in result.stdout
    assert "gone notes/volcano.html" in result.stdout.splitlines()  # the file is named, not only counted
    assert "fastrag index notes --prune" in result.stdout
    assert uris(search_json("lava", "--mode", "keyword")) == ["notes/volcano.html"]  # as the hint says
    assert "note:" not in cli("index", "notes", "--prune").stdout


def test_max_file_size_skips_larger_files_and_refuses_a_bad_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_files(tmp_path, {"d/big.txt": "word " * 1000, "d/small.txt": "word"})
    monkeypatch.chdir(tmp_path)
    result = cli("index", "d", "--max-file-size", "1KB")
    assert result.exit_code == 0 and "indexed 1 files" in result.stdout
    assert "skipped d/big.txt: larger than the size limit (5,000 bytes > 1,000 bytes" in result.stdout
    assert cli("index", "d", "--max-file-size", "lots").exit_code == 2


@pytest.mark.timeout(120)
def test_real_process_index_of_hostile_paths_indexes_every_regular_file(tmp_path: Path) -> None:
    # issue 13.9's acceptance: a FIFO, device symlinks, a symlink loop and a non-UTF-8 name
    folder = tmp_path / "hostile"
    folder.mkdir()
    for i in range(3):
        (folder / f"good{i}.md").write_text(f"# Good {i}\n\nField report number {i}.\n", encoding="utf-8")
    os.mkfifo(folder / "p.md")
    os.symlink("/dev/zero", folder / "zero.md")
    os.symlink("/dev/urandom", folder / "random.txt")
    os.symlink("loop.md", folder / "loop.md")
    with open(os.fsencode(folder) + b"/caf\xe9.md", "wb") as handle:
        handle.write(b"# Cafe\n\nField report from a Latin-1 file name.\n")
    result = run_process("index", "hostile", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "indexed 4 files (4 chunks), 0 unchanged, 4 skipped, 0 failed" in result.stdout
    assert "skipped hostile/p.md: a FIFO (named pipe), not a regular file" in result.stdout
    assert "skipped hostile/zero.md: a symlink to /dev/zero, a character device, not a regular file" in result.stdout
    assert "skipped hostile/random.txt: a symlink to /dev/urandom, a character device" in result.stdout
    assert "skipped hostile/loop.md: symlink loop" in result.stdout
    found = run_process("search", "Latin-1 file name", "--mode", "keyword", "--json", cwd=tmp_path)
    assert json.loads(found.stdout)["documents"][0]["metadata"]["source_uri"] == "hostile/caf\\xe9.md"


def test_two_indexers_into_one_store_both_finish(tmp_path: Path) -> None:
    # issue 13.4: two concurrent `fastrag index` runs on one SQLite store; the second used to fail mid-run
    # with a bare anyio.BrokenResourceError (exit 1). Now they take turns and both finish.
    for folder in ("a", "b"):
        write_files(tmp_path, {f"{folder}/f{i:03d}.md": f"# {folder}{i}\n\nField report {folder} number {i}.\n"
                               for i in range(50)})  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTRAG_")}
    runs = [subprocess.Popen([sys.executable, "-m", "fastrag.cli", "index", folder], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for folder in ("a", "b")]  # fmt: skip
    outputs = [run.communicate(timeout=300) for run in runs]
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err
        assert "indexed 50 files (50 chunks)" in out and "Traceback" not in err
    check = run_process("search", "field report", "--mode", "keyword", "--json", "--top-k", "1", cwd=tmp_path)
    assert check.returncode == 0
    count = run_process("index", "a", "b", cwd=tmp_path)
    assert "indexed 0 files (0 chunks), 100 unchanged" in count.stdout and "the store holds 100 chunks" in count.stdout


def test_an_indexer_waiting_past_the_lock_timeout_exits_3_naming_the_store(tmp_path: Path) -> None:
    import fcntl

    write_files(tmp_path, FILES)
    lock = tmp_path / ".fastrag" / "fastrag.db.index-lock"
    lock.parent.mkdir()
    with lock.open("a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # another run is writing
        held.write("pid 4242")
        held.flush()
        result = run_process("index", "notes", "--lock-timeout", "0.5", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "waiting: another `fastrag index` (pid 4242) is writing to sqlite:///.fastrag/fastrag.db" in result.stderr
    assert "store failed" in result.stderr and "--lock-timeout" in result.stderr
    assert "indexed" not in result.stdout
    after = run_process("index", "notes", cwd=tmp_path)  # released: the next run goes ahead
    assert after.returncode == 0 and "indexed 3 files" in after.stdout


def test_index_into_a_corrupt_store_exits_3_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_files(tmp_path, FILES)
    (tmp_path / "broken.db").write_bytes(b"this is not a SQLite database " * 200)
    monkeypatch.chdir(tmp_path)
    result = cli("index", "notes", "--store", "sqlite:///broken.db")
    assert result.exit_code == 3
    assert "broken.db" in result.stderr


@pytest.mark.parametrize("store", ["sqlite:///a-file/x.db", "sqlite:///a-folder"])
def test_index_into_an_unreachable_store_exits_3_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    write_files(tmp_path, FILES)
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "a-folder").mkdir()
    monkeypatch.chdir(tmp_path)
    result = cli("index", "notes", "--store", store)
    assert result.exit_code == 3
    assert store.removeprefix("sqlite:///") in result.stderr and "store failed" in result.stderr
    assert "indexed" not in result.stdout


# --------------------------------------------------------------------------------------------- search


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_search_puts_the_answering_file_first_in_every_mode(in_index: Path, mode: str) -> None:
    payload = search_json("molten lava", "--mode", mode)
    assert payload["mode"] == mode
    assert uris(payload)[0] == "notes/volcano.html"


def test_keyword_mode_returns_only_files_sharing_a_term(in_index: Path) -> None:
    assert uris(search_json("molten lava", "--mode", "keyword")) == ["notes/volcano.html"]
    assert set(uris(search_json("field report", "--mode", "keyword"))) == ALL_URIS


def test_vector_mode_finds_a_file_by_meaning_without_a_shared_word(in_index: Path) -> None:
    assert search_json("magma", "--mode", "keyword")["documents"] == []
    assert uris(search_json("magma", "--mode", "vector"))[0] == "notes/volcano.html"


def test_search_json_has_the_documented_shape(in_index: Path) -> None:
    payload = search_json("field report", "--mode", "keyword", "--top-k", "3")
    assert set(payload) == {"query", "mode", "rerank", "strategy", "settings", "zero_vector_branches", "skipped_branches", "thresholds",
                            "documents", "incomplete"}
    assert payload["incomplete"] == {} and payload["skipped_branches"] == {} and payload["thresholds"] == {}
    assert payload["zero_vector_branches"] == []
    assert payload["query"] == "field report" and payload["mode"] == "keyword" and payload["rerank"] == "none"
    docs = payload["documents"]
    assert len(docs) == 3
    for doc in docs:
        assert set(doc) == {"id", "content", "metadata"}
        assert doc["metadata"]["source_uri"] in ALL_URIS
        assert doc["id"] == doc["metadata"]["source_uri"] + "#0"  # one chunk per file, ids are uri#chunk
    assert [d["metadata"]["rank"] for d in docs] == [0, 1, 2]
    scores = [d["metadata"]["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)

    volcano = search_json("lava", "--mode", "keyword")["documents"][0]
    assert volcano["content"] == "Field report: volcanoes erupt molten lava."
    assert volcano["metadata"]["title"] == "Volcano"


def test_hybrid_json_records_both_branches(in_index: Path) -> None:
    top = search_json("molten lava")["documents"][0]  # hybrid is the default mode
    assert top["metadata"]["source_uri"] == "notes/volcano.html"
    assert set(top["metadata"]["branches"]) == {"bm25", "vector"}
    assert top["metadata"]["branches"]["bm25"]["rank"] == 0


def test_search_rerank_embedder_matches_the_library_and_keeps_both_stages(in_index: Path) -> None:
    payload = search_json("field report pelican", "--mode", "keyword", "--rerank", "embedder", "--candidate-k", "4",
                          "--top-k", "3")
    assert payload["rerank"] == "embedder"
    docs = payload["documents"]
    for doc in docs:
        assert set(doc["metadata"]["branches"]) == {"first_stage", "reranker"}
        assert doc["metadata"]["score"] == doc["metadata"]["branches"]["reranker"]["score"]

    async def library() -> list[str]:  # the same pipeline built by hand from the public API
        from fastrag.config import open_embedder
        from fastrag.rerankers import EmbedderReranker
        from fastrag.retrieval import BM25Retriever, RerankingRetriever
        from fastrag.vector_store.sqlite import SQLiteVectorStore

        async with SQLiteVectorStore(".fastrag/fastrag.db") as store, open_embedder() as embedder:
            retriever = RerankingRetriever(retriever=BM25Retriever(store=store), reranker=EmbedderReranker(embedder),
                                           candidate_k=4)
            return [d.id for d in await retriever.retrieve("field report pelican", k=3)]

    import anyio

    assert [d["id"] for d in docs] == anyio.run(library)
    first_stage = [d["id"] for d in search_json("field report pelican", "--mode", "keyword", "--top-k", "4")["documents"]]
    assert [d["metadata"]["branches"]["first_stage"]["rank"] for d in docs] == [first_stage.index(d["id"]) for d in docs]


def test_search_rerank_errors_exit_1_naming_what_is_missing(in_index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = cli("search", "pelican", "--rerank", "cross-encoder")
    assert result.exit_code == 1 and "local cross-encoder model folder" in result.stderr
    monkeypatch.delenv("CO_API_KEY", raising=False)
    monkeypatch.delenv("COHERE_API_KEY", raising=False)
    result = cli("search", "pelican", "--rerank", "cohere")
    assert result.exit_code == 1 and "CO_API_KEY" in result.stderr
    assert cli("search", "pelican", "--rerank", "magic").exit_code == 2


def test_search_text_output_lists_rank_uri_and_title(in_index: Path) -> None:
    result = cli("search", "molten lava", "--mode", "keyword")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(" 1. [") and "notes/volcano.html" in lines[0] and lines[0].endswith("Volcano")
    assert lines[1].strip() == "Field report: volcanoes erupt molten lava."


def test_mode_comes_from_the_option_then_the_environment(in_index: Path) -> None:
    assert search_json("lava", env={"FASTRAG_MODE": "keyword"})["mode"] == "keyword"
    assert search_json("lava", "--mode", "vector", env={"FASTRAG_MODE": "keyword"})["mode"] == "vector"


def test_top_k_limits_the_results(in_index: Path) -> None:
    assert len(search_json("field report", "--mode", "keyword", "--top-k", "2")["documents"]) == 2


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_filter_restricts_results_by_metadata(in_index: Path, mode: str) -> None:
    only_volcano = json.dumps({"equals": {"key": "title", "value": "Volcano"}})
    assert uris(search_json("field report", "--mode", mode, "--filter", only_volcano)) == ["notes/volcano.html"]
    pelicans = json.dumps({"startsWith": {"key": "title", "value": "Pelican"}})
    assert set(uris(search_json("field report", "--mode", mode, "--filter", pelicans))) == {
        "notes/pelican.md", "guides/deep/pelican-care.md"}


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--include-glob", "*.md"], {"notes/pelican.md", "guides/deep/pelican-care.md"}),
        (["--include-glob", "guides/**"], {"guides/deep/pelican-care.md"}),
        (["--include-glob", "notes/*.md"], {"notes/pelican.md"}),
        (["--include-glob", "*.{txt,html}"], {"notes/sub/zebra.txt", "notes/volcano.html"}),
        (["--include-glob", "*.txt", "--include-glob", "*.html"], {"notes/sub/zebra.txt", "notes/volcano.html"}),
        (["--exclude-glob", "*.md"], {"notes/sub/zebra.txt", "notes/volcano.html"}),
        (["--include-glob", "*.md", "--exclude-glob", "guides/**"], {"notes/pelican.md"}),
        (["--path-filter", "sub/"], {"notes/sub/zebra.txt"}),
        (["--path-filter", r"^guides/.*\.md$"], {"guides/deep/pelican-care.md"}),
    ],
)
def test_path_rules_restrict_results(in_index: Path, options: list[str], expected: set[str]) -> None:
    payload = search_json("field report", "--mode", "keyword", *options)
    assert set(uris(payload)) == expected
    assert [d["metadata"]["rank"] for d in payload["documents"]] == list(range(len(expected)))


def test_no_match_says_so_and_exits_0(in_index: Path) -> None:
    result = cli("search", "xyzzy", "--mode", "keyword")
    assert result.exit_code == 0
    assert result.stdout.strip() == "No documents matched."
    assert search_json("xyzzy", "--mode", "keyword")["documents"] == []


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_no_match_exits_0_and_says_so_in_every_mode(in_index: Path, mode: str) -> None:
    # k-NN always has nearest neighbours, so "nothing matches" here is a filter no document passes
    nothing = json.dumps({"equals": {"key": "title", "value": "No such title"}})
    result = cli("search", "lava", "--mode", mode, "--filter", nothing)
    assert result.exit_code == 0 and result.stdout.strip() == "No documents matched.", result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_a_store_failing_mid_search_exits_3_naming_it_never_no_match(
    in_index: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    from fastrag.errors import BackendError
    from fastrag.vector_store.sqlite import SQLiteVectorStore

    async def fail(self, *args, **kwargs):
        raise BackendError("disk I/O error")  # a failure that does not name its store

    monkeypatch.setattr(SQLiteVectorStore, "search_text", fail)
    monkeypatch.setattr(SQLiteVectorStore, "search_vector", fail)
    for extra in ([], ["--json"]):
        result = cli("search", "lava", "--mode", mode, *extra)
        assert result.exit_code == 3
        assert DEFAULT_STORE in result.stderr and "disk I/O error" in result.stderr
        assert result.stdout == ""  # never "No documents matched.", never an empty JSON list


def test_several_store_failures_at_once_exit_3_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fastrag.evaluation.beir_eval as beir_eval
    from fastrag.errors import BackendError

    async def fail(*args, **kwargs):
        raise ExceptionGroup("queries failed", [BackendError("timeout", store="sqlite:///eval.db"),
                                               BackendError("timeout", store="sqlite:///eval.db")])

    monkeypatch.setattr(beir_eval, "evaluate_beir", fail)
    (tmp_path / "data").mkdir()
    result = cli("eval", str(tmp_path / "data"))
    assert result.exit_code == 3 and "sqlite:///eval.db" in result.stderr


def test_path_rules_that_exclude_everything_are_no_match(in_index: Path) -> None:
    result = cli("search", "lava", "--mode", "keyword", "--include-glob", "*.pdf")
    assert result.exit_code == 0
    assert result.stdout.strip() == "No documents matched."


def test_invalid_filter_json_exits_1_with_the_filter_error(in_index: Path) -> None:
    result = cli("search", "lava", "--filter", "{bad")
    assert result.exit_code == 1
    assert "filter is not valid JSON" in result.stderr
    assert result.stdout == ""


def test_malformed_filter_exits_1_naming_the_bad_node(in_index: Path) -> None:
    result = cli("search", "lava", "--filter", json.dumps({"equals": {"key": "title"}}))
    assert result.exit_code == 1
    assert "$.equals" in result.stderr


def test_invalid_regex_exits_1_and_never_returns_unfiltered_results(in_index: Path) -> None:
    result = cli("search", "lava", "--mode", "keyword", "--path-filter", "(")
    assert result.exit_code == 1
    assert "path_filter is not a valid regular expression" in result.stderr
    assert "volcano" not in result.stdout


def test_invalid_top_k_exits_1(in_index: Path) -> None:
    result = cli("search", "lava", "--top-k", "0")
    assert result.exit_code == 1
    assert "top_k must be an int >= 1" in result.stderr


def test_unknown_store_scheme_exits_1_naming_it(in_index: Path) -> None:
    result = cli("search", "lava", "--store", "mongodb://localhost/db")
    assert result.exit_code == 1
    assert "'mongodb'" in result.stderr


def test_search_before_index_exits_3_naming_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("search", "lava")
    assert result.exit_code == 3
    assert DEFAULT_STORE in result.stderr and "fastrag index" in result.stderr
    other = cli("search", "lava", "--store", "sqlite:///elsewhere/x.db")
    assert other.exit_code == 3
    assert "sqlite:///elsewhere/x.db" in other.stderr
    # looking does not create an empty store
    assert not (tmp_path / ".fastrag").exists() and not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_corrupt_store_exits_3_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    store = tmp_path / ".fastrag" / "fastrag.db"
    store.parent.mkdir()
    store.write_bytes(os.urandom(8192))
    monkeypatch.chdir(tmp_path)
    result = cli("search", "lava", "--mode", mode)
    assert result.exit_code == 3
    assert ".fastrag/fastrag.db" in result.stderr


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_zero_byte_store_exits_3_naming_it_never_no_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    # issue 13.7: SQLite opens a 0-byte file as a new, empty database: lost data read as "No documents matched."
    store = tmp_path / ".fastrag" / "fastrag.db"
    store.parent.mkdir()
    store.write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    result = cli("search", "lava", "--mode", mode)
    assert result.exit_code == 3, result.output
    assert ".fastrag/fastrag.db" in result.stderr and "empty (0 bytes)" in result.stderr
    assert "No documents matched" not in result.stdout
    assert store.stat().st_size == 0  # looking did not turn it into a store


def test_a_damaged_store_exits_3_naming_it(in_index: Path) -> None:
    store = in_index / ".fastrag" / "fastrag.db"
    backup = store.read_bytes()
    try:
        for position in range(4096, len(backup), 4096):  # the start of every page after the first
            damaged = bytearray(backup)
            damaged[position + 8] ^= 0xFF
            store.write_bytes(bytes(damaged))
            result = cli("search", "lava", "--mode", "keyword")
            assert result.exit_code in (0, 3), (position, result.output)
            if result.exit_code == 3:
                assert ".fastrag/fastrag.db" in result.stderr and "Traceback" not in result.output
    finally:
        store.write_bytes(backup)


def test_search_with_another_embedding_model_than_the_index_exits_1(
    in_index: Path, tmp_path: Path
) -> None:
    # a copy of the shipped model under another name: the store recorded "static-minilm-d256"
    from fastrag.ingestion import DEFAULT_MODEL

    other = tmp_path / "other-model"
    other.mkdir()
    for file in DEFAULT_MODEL.iterdir():
        (other / file.name).symlink_to(file)
    result = cli("search", "lava", "--mode", "vector", env={"FASTRAG_EMBEDDING_MODEL": str(other)})
    assert result.exit_code == 1
    assert "static-minilm-d256" in result.stderr and "other-model" in result.stderr
    # keyword search embeds nothing, so it does not care
    keyword = cli("search", "lava", "--mode", "keyword", env={"FASTRAG_EMBEDDING_MODEL": str(other)})
    assert keyword.exit_code == 0


def test_usage_errors_exit_2(in_index: Path) -> None:
    assert cli("search", "lava", "--mode", "fuzzy").exit_code == 2
    assert cli("search").exit_code == 2
    assert cli("index").exit_code == 2


# --------------------------------------------------------------------------------- as a real process


def test_real_process_index_then_search(tmp_path: Path) -> None:
    write_files(tmp_path, FILES)
    index = run_process("index", "notes", "guides", cwd=tmp_path)
    assert index.returncode == 0, index.stderr
    search = run_process("search", "sardines", "--mode", "keyword", "--json", cwd=tmp_path)
    assert search.returncode == 0, search.stderr
    assert uris(json.loads(search.stdout)) == ["guides/deep/pelican-care.md"]


def test_real_process_exit_codes(tmp_path: Path) -> None:
    missing = run_process("search", "lava", cwd=tmp_path)
    assert missing.returncode == 3
    assert DEFAULT_STORE in missing.stderr and missing.stdout == ""
    bad_filter = run_process("search", "lava", "--store", "sqlite:///:memory:", "--filter", "[", cwd=tmp_path)
    assert bad_filter.returncode == 1
    assert "filter is not valid JSON" in bad_filter.stderr
    usage = run_process("search", "lava", "--mode", "fuzzy", cwd=tmp_path)
    assert usage.returncode == 2


# ----------------------------------------------------------------------------------------------- eval


BEIR_CORPUS = [
    {"_id": "d1", "title": "Pelican", "text": "Pelicans scoop fish with a throat pouch."},
    {"_id": "d2", "title": "Zebra", "text": "Zebras graze on the savanna grassland."},
    {"_id": "d3", "title": "Volcano", "text": "Volcanoes erupt molten lava."},
    {"_id": "d4", "title": "Glacier", "text": "Glaciers carve valleys from ice."},
    {"_id": "d5", "title": "Lighthouse", "text": "Lighthouses guide ships at night."},
]
BEIR_QUERIES = [
    {"_id": "q1", "text": "pouch"},                # only d1 has the word
    {"_id": "q2", "text": "savanna"},              # only d2
    {"_id": "q3", "text": "lava"},                 # only d3
    {"_id": "q4", "text": "submarine periscope"},  # no document shares a term: nothing is retrieved
    {"_id": "q5", "text": "lighthouse"},           # only d5 shares a term; d4 is judged relevant too
]
QRELS = {
    "test": [("q1", "d1", 1), ("q2", "d2", 1), ("q3", "d3", 1)],
    "dev": [("q1", "d1", 1), ("q2", "d2", 1), ("q3", "d3", 1), ("q4", "d4", 1), ("q5", "d5", 1), ("q5", "d4", 1)],
}


@pytest.fixture
def beir_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in BEIR_CORPUS), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in BEIR_QUERIES), encoding="utf-8")
    for split, rows in QRELS.items():
        lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in rows]
        (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_eval_json_when_every_query_finds_its_one_document_first(
    beir_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("eval", str(beir_dir), "--mode", "keyword", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"ndcg@10", "recall@100", "mrr@10"}
    assert report == pytest.approx({"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0})
    # the temporary store is gone, and nothing was written to the working directory
    assert not (tmp_path / ".fastrag").exists()


def test_eval_json_means_over_queries_worked_by_hand(beir_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("eval", str(beir_dir), "--mode", "keyword", "--split", "dev", "--json")
    assert result.exit_code == 0, result.stderr
    # q1..q3: 1 each. q4: nothing retrieved, 0 each. q5: d5 at rank 1, d4 never retrieved:
    #   nDCG@10 = (1 / log2 2) / (1 / log2 2 + 1 / log2 3), Recall@100 = 1/2, MRR@10 = 1.
    q5_ndcg = 1 / (1 + 1 / math.log2(3))
    assert json.loads(result.stdout) == pytest.approx(
        {"ndcg@10": (3 + 0 + q5_ndcg) / 5, "recall@100": (3 + 0 + 0.5) / 5, "mrr@10": (3 + 0 + 1) / 5}
    )


def test_eval_text_output_and_missing_split(beir_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("eval", str(beir_dir), "--mode", "keyword")
    assert result.exit_code == 0, result.stderr
    assert "ndcg@10 = 1.0000" in result.stdout and "recall@100 = 1.0000" in result.stdout
    missing = cli("eval", str(beir_dir), "--mode", "keyword", "--split", "train")
    assert missing.exit_code == 1
    assert "train.tsv" in missing.stderr


@pytest.mark.parametrize("command", [["search", "anything"], ["index", "."], ["eval", "."]])
def test_a_bad_setting_is_an_error_line_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         command: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli(*command, env={"FASTRAG_MODE": "bogus"})
    assert result.exit_code == 1
    assert "unknown mode 'bogus'" in result.output and "Traceback" not in result.output


def test_eval_refuses_a_top_k_below_the_recall_cutoff(tmp_path: Path) -> None:
    result = cli("eval", str(tmp_path), "--top-k", "5")
    assert result.exit_code == 1
    assert "at least 100" in result.output


MISSING_STORES = {
    # a typo in a path or collection name: reading must fail naming the store, never answer "no match"
    "sqlite": ("sqlite:///typo.db", None),
    "qdrant-local": ("qdrant+path:///qdrant_typo?collection=docs&bm25=true", "qdrant_client"),
    "milvus-lite": ("milvus-lite:///milvus_typo.db?collection=docs", "pymilvus"),
    "chroma-embedded": ("chroma+path:///chroma_typo?collection=docs", "chromadb"),
    "opensearch": ("opensearch://{opensearch}/typo-index", "opensearchpy"),
    "postgres": ("{postgres}?table=typo_table", "psycopg"),
}


@pytest.mark.parametrize("backend", sorted(MISSING_STORES))
def test_search_of_a_store_that_does_not_exist_exits_3_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, request: pytest.FixtureRequest
) -> None:
    url, module = MISSING_STORES[backend]
    if module:
        pytest.importorskip(module, reason=f"the {backend} extra is not installed")
    if "{opensearch}" in url:
        url = url.replace("{opensearch}", request.getfixturevalue("opensearch_emulator").split("://", 1)[1].rstrip("/"))
    if "{postgres}" in url:
        url = url.replace("{postgres}", request.getfixturevalue("postgres_url"))
    monkeypatch.chdir(tmp_path)
    result = cli("search", "anything", "--store", url, "--mode", "vector")
    assert result.exit_code == 3, result.output
    assert "No documents matched" not in result.output
    assert "typo" in result.stderr


# ------------------------------------------------------------------------------------------------ ask


@pytest.fixture
def llm_server():
    """An OpenAI-compatible chat-completions server whose model cites the source about pelicans."""
    from fastrag.testing.http_server import ScriptedHTTPServer, chat_completion

    def answer(body: dict) -> object:
        prompt = body["messages"][-1]["content"]
        # the model reads the numbered sources and cites the one that mentions a throat pouch
        for block in prompt.split("\n["):
            if "throat pouch" in block:
                return chat_completion(f"Pelicans scoop fish with a throat pouch [{block.split(']')[0]}].")
        return chat_completion("I do not know.")

    with ScriptedHTTPServer([answer], path_prefix="/v1") as server:
        yield server


def llm_env(server) -> dict[str, str]:
    return {"FASTRAG_LLM_BASE_URL": server.url, "FASTRAG_LLM_MODEL": "local-model", "FASTRAG_LLM_API_KEY": "sk-1"}


def test_ask_answers_from_the_index_citing_the_retrieved_source(in_index: Path, llm_server) -> None:
    result = cli("ask", "how do pelicans catch fish?", "--mode", "keyword", "--json", env=llm_env(llm_server))
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["status"] == "answered" and payload["partial"] is False
    sources = {d["id"]: d for d in payload["sources"]}
    [citation] = payload["citations"]
    cited = sources[citation["id"]]
    assert cited["metadata"]["source_uri"] == "notes/pelican.md"
    assert f"[{citation['number']}]" in payload["answer"]
    assert payload["sources"][citation["number"] - 1]["id"] == citation["id"]
    [request] = llm_server.requests
    assert request.body["model"] == "local-model" and request.headers["authorization"] == "Bearer sk-1"
    prompt = request.body["messages"][-1]["content"]
    assert "notes/pelican.md" in prompt and "throat pouch" in prompt  # grounded: the sources are in the prompt

    text = cli("ask", "how do pelicans catch fish?", "--mode", "keyword", env=llm_env(llm_server))
    assert text.exit_code == 0
    assert text.stdout.startswith("Pelicans scoop fish with a throat pouch [")
    assert f"*[{citation['number']}] notes/pelican.md" in text.stdout  # cited sources are starred


def test_ask_without_an_llm_endpoint_exits_1_saying_what_to_set(in_index: Path) -> None:
    result = cli("ask", "how do pelicans catch fish?", env={"FASTRAG_LLM_BASE_URL": None, "FASTRAG_LLM_MODEL": None})
    assert result.exit_code == 1 and "FASTRAG_LLM_BASE_URL" in result.stderr


def test_ask_never_calls_the_llm_when_retrieval_fails_or_finds_nothing(
    in_index: Path, llm_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    none = cli("ask", "magma", "--mode", "keyword", env=llm_env(llm_server))
    assert none.exit_code == 0 and "No sources were found" in none.stdout
    assert llm_server.requests == []

    from fastrag.errors import BackendError
    from fastrag.vector_store.sqlite import SQLiteVectorStore

    async def fail(self, *args, **kwargs):
        raise BackendError("disk I/O error")

    monkeypatch.setattr(SQLiteVectorStore, "search_text", fail)
    monkeypatch.setattr(SQLiteVectorStore, "search_vector", fail)
    for mode in ("keyword", "hybrid"):
        failed = cli("ask", "how do pelicans catch fish?", "--mode", mode, env=llm_env(llm_server))
        assert failed.exit_code == 3, failed.stderr
        assert DEFAULT_STORE in failed.stderr and "disk I/O error" in failed.stderr
        assert failed.stdout == ""
    assert llm_server.requests == []


def test_ask_reports_an_llm_failure_with_exit_4(in_index: Path, llm_server) -> None:
    from fastrag.testing.http_server import Reply

    llm_server.script = [lambda body: Reply(401, {"error": {"message": "invalid api key"}})]
    result = cli("ask", "how do pelicans catch fish?", "--mode", "keyword", env=llm_env(llm_server))
    assert result.exit_code == 4
    assert "LLM failed" in result.stderr and llm_server.url in result.stderr and "invalid api key" in result.stderr
    assert result.stderr.count(llm_server.url) == 1  # named once, not once by the CLI and again by the error


def test_ask_warns_about_citations_that_name_no_source(in_index: Path, llm_server) -> None:
    from fastrag.testing.http_server import chat_completion

    llm_server.script = [lambda body: chat_completion("Pelicans use a throat pouch [1], or so says [9].")]
    result = cli("ask", "how do pelicans catch fish?", "--mode", "keyword", env=llm_env(llm_server))
    assert result.exit_code == 0
    assert "[9]" in result.stderr and "name no source" in result.stderr
    assert "[1]" not in result.stderr


def test_eval_refuses_qrels_judging_documents_missing_from_the_corpus(
    beir_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 16.9: qrels of another corpus scored nDCG 0.04 and exited 0 with no word
    lines = ["query-id\tcorpus-id\tscore", "q1\td1\t1", "q2\tgone-1\t1", "q3\tgone-2\t1", "q3\td3\t0"]
    (beir_dir / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    refused = cli("eval", str(beir_dir), "--mode", "keyword", "--json")
    assert refused.exit_code == 1 and refused.stdout == ""
    assert "2 of 3 documents judged relevant in qrels/test.tsv are not in corpus.jsonl" in refused.stderr
    assert "'gone-1', 'gone-2'" in refused.stderr and "--allow-missing" in refused.stderr
    allowed = cli("eval", str(beir_dir), "--mode", "keyword", "--json", "--allow-missing")
    assert allowed.exit_code == 0, allowed.stderr
    assert "warning: " in allowed.stderr and "2 of 3 documents" in allowed.stderr
    assert json.loads(allowed.stdout)["recall@100"] == pytest.approx(1 / 3)  # q1 found; q2 and q3 cannot be


@pytest.mark.anyio
async def test_evaluate_beir_reports_indexing_and_query_progress(beir_dir: Path, tmp_path: Path) -> None:
    from fastrag.evaluation.beir_eval import evaluate_beir

    seen: list[tuple[str, int, int]] = []
    await evaluate_beir(beir_dir, mode="keyword", store_url=f"sqlite:///{tmp_path}/p.db",
                        progress=lambda *tick: seen.append(tick))  # fmt: skip
    assert seen[0] == ("index", 5, 5)
    queries = [tick for tick in seen if tick[0] == "query"]
    assert [done for _, done, _ in queries] == [0, 1, 2, 3] and {total for *_, total in queries} == {3}


def test_eval_draws_query_progress_on_a_terminal(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from fastrag.cli.evaluate import EvalProgress as _EvalProgress

    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with _EvalProgress() as progress:
        progress.update("index", 50, 50)
        progress.update("query", 0, 30)
        progress.update("query", 30, 30)
    drawn = capsys.readouterr().err
    assert "Indexing corpus" in drawn and "50/50" in drawn
    assert "Queries" in drawn and "30/30" in drawn and "queries/s" in drawn


def test_rerank_embedder_with_the_retrieval_model_warns_at_run_time(in_index: Path, tmp_path: Path) -> None:
    # issue 16.6: slower and worse than no reranking, and nothing said so
    same = cli("search", "pelican", "--rerank", "embedder")
    assert same.exit_code == 0 and "warning: --rerank embedder with 'static-minilm-d256'" in same.stderr
    assert "0.396" in same.stderr and "--rerank-model" in same.stderr
    from fastrag.ingestion import DEFAULT_MODEL

    other = tmp_path / "stronger-model"
    other.mkdir()
    for file in DEFAULT_MODEL.iterdir():
        (other / file.name).symlink_to(file)
    different = cli("search", "pelican", "--rerank", "embedder", "--rerank-model", str(other))
    assert different.exit_code == 0 and "warning" not in different.stderr


# ------------------------------------------------------------------ one vocabulary (a fresh user's findings)


def test_fastrag_top_k_and_the_toml_top_k_reach_search_and_a_flag_wins(in_index: Path, tmp_path: Path) -> None:
    """FASTRAG_TOP_K and fastrag.toml's top_k were checked, then dropped: --top-k's default 5 always won."""
    payload = search_json("field report", "--mode", "keyword", env={"FASTRAG_TOP_K": "2"})
    assert len(payload["documents"]) == 2
    assert payload["settings"]["top_k"] == {"value": 2, "origin": "knowledge_base"}  # variables: the kb layer
    assert len(search_json("field report", "--mode", "keyword", "--top-k", "3", env={"FASTRAG_TOP_K": "2"})["documents"]) == 3
    assert search_json("field report", "--mode", "keyword")["settings"]["top_k"]["value"] == 5  # the CLI's default


def test_rerank_none_on_the_command_line_wins_over_fastrag_rerank(in_index: Path) -> None:
    payload = search_json("field report", "--rerank", "none", env={"FASTRAG_RERANK": "true"})
    assert payload["strategy"] == "hybrid" and payload["settings"]["rerank"]["value"] is False
    assert search_json("field report", env={"FASTRAG_RERANK": "true"})["strategy"] == "hybrid+rerank"


def test_mode_auto_is_a_mode_on_the_command_line_too(in_index: Path) -> None:
    assert search_json("field report", "--mode", "auto")["strategy"] == "direct"  # a small corpus: exact fusion
    assert search_json("field report", env={"FASTRAG_MODE": "auto"})["strategy"] == "direct"


def test_the_older_names_are_read_from_the_environment_and_the_file(in_index: Path) -> None:
    payload = search_json("field report", env={"FASTRAG_SEARCH_MODE": "keyword", "FASTRAG_RETRIEVAL_K": "12"})
    assert payload["settings"]["mode"]["value"] == "keyword" and payload["settings"]["candidate_k"]["value"] == 12


def test_a_bad_path_filter_is_refused_where_it_is_set(in_index: Path) -> None:
    result = cli("search", "field report", "--path-filter", "(")
    assert result.exit_code == 1 and "path_filter is not a valid regular expression" in result.stderr
