"""Reliability, round three (issue 26), ingestion: the parser's memory bound (26.2) and headings as text
(26.8). The tests marked "failed before" failed on the code before their fix; the others guard what the fix
must keep (the chunks of plain text are those of the whole-file parser, byte for byte).

Memory is asserted with :mod:`tracemalloc` (Python's allocations, counted exactly, not timed) or with the
worker process's own limit; the Word "bomb" these tests build is 16 MB of XML in about 70 KB, tripping a
48 MiB limit in a second or two, so the test itself stays small.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import random
import subprocess
import sys
import tracemalloc
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrag.cli import main
from fastrag.errors import InvalidParameterError, ParserMemoryError
from fastrag.ingestion import Chunker, IngestionPipeline, parse
from fastrag.ingestion.parsed import Section
from fastrag.ingestion.parsers import FileKind, iter_text
from fastrag.ingestion.worker import MEMORY_LIMIT_ENFORCED, ParserProcess
from fastrag.retrieval import BM25Retriever, SectionIndex
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

docx = pytest.importorskip("docx", reason="the docx extra is not installed")

_ENV = {"FASTRAG_STORE": None, "FASTRAG_MODE": None, "FASTRAG_CONFIG": None, "FASTRAG_LEXICAL_STORE": None,
        "FASTRAG_EMBEDDING_MODEL": None}
LIMIT = 48 * 2**20  # the workers' memory limit in these tests: the bomb needs about 180 MB, a letter 1 MB
needs_rlimit = pytest.mark.skipif(not MEMORY_LIMIT_ENFORCED, reason="the parser memory limit needs Linux's RLIMIT_AS")


def docx_bomb(xml_bytes: int) -> bytes:
    """A valid ``.docx`` whose ``word/document.xml`` holds about ``xml_bytes`` of short paragraphs, written
    to the zip as a stream (deflate packs it about 250:1), as the tester's 1.8 MB file held 600 MB."""
    template = io.BytesIO()
    docx.Document().save(template)
    source = zipfile.ZipFile(io.BytesIO(template.getvalue()))
    paragraph = b"<w:p><w:r><w:t>quarterly merger plan with acme</w:t></w:r></w:p>" * 10_000
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if info.filename != "word/document.xml":
                target.writestr(info, source.read(info))
                continue
            head, tail = source.read(info).split(b"<w:body>", 1)
            with target.open(info.filename, "w", force_zip64=True) as member:
                member.write(head + b"<w:body>")
                for _ in range(max(1, xml_bytes // len(paragraph))):
                    member.write(paragraph)
                member.write(tail)
    return out.getvalue()


def letter_docx() -> bytes:
    document = docx.Document()
    document.add_heading("Wiring", 1)
    document.add_paragraph("Connect the inverter to the battery bank.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


# ------------------------------------------------------------------------- 26.2: the parser's memory bound


@needs_rlimit
@pytest.mark.anyio
async def test_a_docx_over_the_parsers_memory_limit_is_skipped_as_too_large_never_malformed(tmp_path: Path) -> None:
    """Failed before: the parser had no memory bound (the tester's file took 9.7 GB, then was called malformed)."""
    bomb = docx_bomb(16_000_000)
    assert len(bomb) < 200_000  # small on disk, far under max_file_bytes and the 10x unpacked-size guard
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a_bomb.docx").write_bytes(bomb)
    (tmp_path / "docs" / "b_letter.docx").write_bytes(letter_docx())
    async with SQLiteVectorStore(tmp_path / "index.db") as store:
        pipeline = IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False,
                                     parse_memory_limit=LIMIT)
        report = await pipeline.run([tmp_path / "docs"])
        assert report.ok, report.errors  # skipped, not failed: nothing is called malformed
        (skipped,) = report.skipped_files
        assert skipped.path.endswith("a_bomb.docx")
        assert skipped.reason.startswith(
            "too large for the parser's memory limit (48 MiB; raise it with --parse-memory-limit or "
            "IngestionPipeline(parse_memory_limit=...)): it ran out of memory"
        ), skipped.reason
        assert "malformed" not in skipped.reason
        # the next file parses under the same limit, in a fresh worker
        assert report.files_indexed == 1
        [hit] = await BM25Retriever(store=store).retrieve("inverter battery", k=1)
        assert hit.metadata["source_uri"].endswith("b_letter.docx")


@needs_rlimit
@pytest.mark.anyio
async def test_the_parser_process_raises_a_typed_error_naming_the_file_and_the_limit() -> None:
    """Failed before: ParserProcess had no memory limit and no such error."""
    async with ParserProcess(timeout=120, memory_limit=LIMIT) as parser:
        with pytest.raises(ParserMemoryError) as caught:
            await parser.parse(docx_bomb(16_000_000), source_uri="plans/bomb.docx", kind=FileKind.DOCX,
                               max_unpacked_bytes=None)
        assert caught.value.limit == LIMIT and caught.value.source == "plans/bomb.docx"
        assert str(caught.value).startswith("plans/bomb.docx: too large for the parser's memory limit (48 MiB")
        [document], _ = await parser.parse(letter_docx(), source_uri="letter.docx", kind=FileKind.DOCX,
                                           max_unpacked_bytes=None)
        assert document.sections[0].heading_path == ("Wiring",)


@needs_rlimit
def test_fastrag_index_takes_the_limit_and_names_the_file_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before: ``fastrag index`` had no --parse-memory-limit."""
    (tmp_path / "bomb.docx").write_bytes(docx_bomb(16_000_000))
    (tmp_path / "letter.docx").write_bytes(letter_docx())
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(main, ["index", ".", "--parse-memory-limit", "48MiB"], env=_ENV, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr  # a skipped file is no failure
    assert "indexed 1 files" in result.stdout and "1 skipped, 0 failed" in result.stdout
    assert "skipped bomb.docx: too large for the parser's memory limit (48 MiB" in result.stdout
    bad = runner.invoke(main, ["index", ".", "--parse-memory-limit", "lots"], env=_ENV, catch_exceptions=False)
    assert bad.exit_code == 2 and "--parse-memory-limit" in bad.stderr


def test_the_memory_limit_is_checked_and_may_be_turned_off() -> None:
    store = SQLiteVectorStore(":memory:")
    for bad in (0, -1, 1.5, True, "2GiB"):
        with pytest.raises(InvalidParameterError, match="parse_memory_limit"):
            IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, parse_memory_limit=bad)  # type: ignore[arg-type]
    IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, parse_memory_limit=None)


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(("merger", "plan", "acme", "board", "quarterly", "a", "tuesday.")) for _ in range(count))


def test_cutting_a_long_paragraph_holds_a_window_of_it_not_every_word_boundary() -> None:
    """Failed before: the chunker listed every word and sentence boundary of a paragraph (Match objects and
    ints), 30x the text: a 60 MB file of one paragraph took 1.9 GB to cut."""
    text = _words(random.Random(7), 600_000)  # about 4 MB, one paragraph
    tracemalloc.start()
    try:
        spans = Chunker().split_text(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(spans) > 4_000
    assert peak < 2_000_000, f"cutting 4 MB held {peak:,} bytes"  # the spans and one 64K-character window


def test_plain_text_is_chunked_as_it_streams_holding_about_one_chunk() -> None:
    """Failed before: there was no way to chunk text as it is read (the whole file was decoded, stripped and
    kept, and its chunks cut from that)."""
    rng = random.Random(11)
    blocks = [_words(rng, 9_000) + ("\n\n" if number % 3 == 0 else " ") for number in range(7)]

    def pieces() -> Iterator[str]:  # 16 MB of text in 64 KB pieces, never held at once
        for number in range(250):
            yield blocks[number % len(blocks)]

    chunker = Chunker()
    count = longest = 0
    tracemalloc.start()
    try:
        for chunk in chunker.chunk_stream(pieces()):
            count += 1
            longest = max(longest, len(chunk.text))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count > 15_000 and longest <= chunker.chunk_size
    assert peak < 600_000, f"streaming 16 MB held {peak:,} bytes"  # a piece, a window and a chunk


_TEXT_ALPHABET = st.sampled_from(["a", "b", " ", ".", "!", '"', ")", "\n", "\r", "\t", "é", "€", "😀", "\u3002", "\n\n",
                                  " \n \n", "\r\n", "word ", "Quarterly merger plan. "])


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(_TEXT_ALPHABET, max_size=120),
    bom=st.booleans(),
    size=st.integers(min_value=1, max_value=40),
    overlap_share=st.floats(min_value=0, max_value=0.99),
    cuts=st.lists(st.integers(min_value=0, max_value=2_000), max_size=8),
)
def test_streamed_chunks_are_the_chunks_of_the_whole_file(
    parts: list[str], bom: bool, size: int, overlap_share: float, cuts: list[int]
) -> None:
    """Chunk boundaries are unchanged: decoding and cutting in byte blocks (a character, a ``\\r\\n`` or a
    byte-order mark split between blocks) gives exactly the chunks of the whole-file parser."""
    data = (codecs.BOM_UTF8 if bom else b"") + "".join(parts).encode("utf-8")
    chunker = Chunker(chunk_size=size, chunk_overlap=int(overlap_share * size))
    [document] = parse(data, source_uri="notes.txt")
    expected = [(c.text, c.start, c.end) for c in chunker.chunk(document)]
    edges = sorted({min(cut, len(data)) for cut in cuts})
    blocks = [data[a:b] for a, b in zip([0, *edges], [*edges, len(data)], strict=True)]

    def stripped() -> Iterator[str]:
        started = False
        for piece in iter_text(blocks, source="notes.txt"):
            if not started:
                piece = piece.lstrip()
                started = bool(piece)
            if piece:
                yield piece

    assert [(c.text, c.start, c.end) for c in chunker.chunk_stream(stripped())] == expected


@pytest.mark.anyio
async def test_a_plain_text_file_is_indexed_with_the_chunks_of_the_whole_file(tmp_path: Path) -> None:
    """The pipeline reads .txt block by block (1 MiB): its chunks, ids, offsets and hash are those of the
    whole file; a bad byte past the first block is named with its offset in the file (failed before: in a
    file starting with a byte-order mark, the offset and the byte named were 3 bytes early)."""
    rng = random.Random(5)
    paragraphs = [_words(rng, rng.randint(5, 400)).replace("a ", "à ") + ("\r\n" if i % 7 else " €😀") for i in range(4_000)]
    data = codecs.BOM_UTF8 + ("  \r\n" + "\r\n\r\n".join(paragraphs)).encode("utf-8")
    assert len(data) > 3 * 2**20
    (tmp_path / "notes.txt").write_bytes(data)
    bad = bytearray(data)
    bad[2_500_000:2_500_001] = b"\xff"
    (tmp_path / "bad.txt").write_bytes(bytes(bad))
    async with SQLiteVectorStore(":memory:") as store:
        report = await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False).run(
            [tmp_path / "notes.txt", tmp_path / "bad.txt"]
        )
        [failure] = report.errors
        assert "bad.txt: not valid UTF-8 (byte 0xff at offset 2500000)" in failure.message
        stored = sorted(await store.get(), key=lambda d: d.metadata["chunk_index"])
    [document] = parse(data, source_uri=stored[0].metadata["source_uri"])
    chunks = Chunker().chunk(document)
    assert report.files_indexed == 1 and len(stored) == len(chunks) > 2_000
    assert [d.content for d in stored] == [c.text for c in chunks]
    assert [(d.metadata["section_start"], d.metadata["section_end"]) for d in stored] == [(c.start, c.end) for c in chunks]
    assert {d.metadata["content_hash"] for d in stored} == {hashlib.sha256(data).hexdigest()}


# ---------------------------------------------------------------------------------- 26.8: headings are text


@pytest.mark.anyio
async def test_a_markdown_file_holding_only_a_heading_is_indexed_and_found(tmp_path: Path) -> None:
    """Failed before: skipped as "no text to index (empty)"."""
    (tmp_path / "plan.md").write_text("# Quarterly merger plan with Acme\n")
    (tmp_path / "other.md").write_text("# Lunch\n\nSandwiches on Friday.\n")
    async with SQLiteVectorStore(":memory:") as store:
        report = await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False).run(
            [tmp_path]
        )
        assert report.files_indexed == 2 and not report.skipped_files, report.skipped_files
        [hit] = await BM25Retriever(store=store).retrieve("merger plan", k=5)
    assert hit.metadata["source_uri"].endswith("plan.md")
    assert hit.content == "Quarterly merger plan with Acme"
    assert hit.metadata["headings"] == ["Quarterly merger plan with Acme"]


def test_fastrag_search_finds_a_heading_with_no_body(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before: ``fastrag index`` skipped the file, and ``fastrag search`` found nothing."""
    (tmp_path / "plan.md").write_text("# Quarterly merger plan with Acme\n")
    (tmp_path / "lunch.md").write_text("# Lunch\n\nSandwiches on Friday.\n")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    indexed = runner.invoke(main, ["index", "."], env=_ENV, catch_exceptions=False)
    assert indexed.exit_code == 0 and "indexed 2 files" in indexed.stdout and "0 skipped" in indexed.stdout, indexed.stdout
    found = runner.invoke(main, ["search", "merger plan", "--mode", "keyword"], env=_ENV, catch_exceptions=False)
    assert found.exit_code == 0, found.stderr
    assert "plan.md" in found.stdout.splitlines()[0]


def _markdown() -> bytes:
    return b"# Guide\n\n## Agenda\n\n## Minutes\n\nWe met on Tuesday.\n\nThe board agreed.\n\n## Budget\n"


def _html() -> bytes:
    return (b"<html><body><h1>Guide</h1><h2>Agenda</h2><h2>Minutes</h2><p>We met on Tuesday.</p>"
            b"<p>The board agreed.</p><h2>Budget</h2></body></html>")


def _docx() -> bytes:
    document = docx.Document()
    document.add_heading("Guide", 1)
    document.add_heading("Agenda", 2)
    document.add_heading("Minutes", 2)
    document.add_paragraph("We met on Tuesday.")
    document.add_paragraph("The board agreed.")
    document.add_heading("Budget", 2)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@pytest.mark.parametrize(("name", "make"), [("minutes.md", _markdown), ("minutes.html", _html), ("minutes.docx", _docx)])
def test_a_heading_with_nothing_under_it_is_its_own_chunk_and_the_other_chunks_are_unchanged(name: str, make) -> None:
    """Failed before: "Agenda" and "Budget" were in no chunk. An enclosing heading ("Guide") is on the
    heading path of every chunk under it and gets no chunk of its own; the body's chunk is as before."""
    [document] = parse(make(), source_uri=name)
    chunks = Chunker().chunk(document)
    assert [(c.text, c.heading_path, c.start, c.end) for c in chunks] == [
        ("Agenda", ("Guide", "Agenda"), 0, 0),
        ("We met on Tuesday.\n\nThe board agreed.", ("Guide", "Minutes"), 0, 37),
        ("Budget", ("Guide", "Budget"), 0, 0),
    ]


def test_a_heading_longer_than_a_chunk_is_cut_like_a_paragraph() -> None:
    heading = "Quarterly merger plan with Acme and its board"
    chunks = Chunker(chunk_size=16, chunk_overlap=0).chunk_section(Section(heading_path=("Notes", heading), text=" \n"))
    assert [c.text for c in chunks] == ["Quarterly merger", "plan with Acme", "and its board"]
    assert all(c.start == c.end == 0 and c.heading_path == ("Notes", heading) for c in chunks)


@pytest.mark.anyio
async def test_a_heading_chunk_resolves_to_its_section(tmp_path: Path) -> None:
    """Failed before: there was no such chunk to resolve."""
    (tmp_path / "minutes.md").write_bytes(_markdown())
    async with SQLiteVectorStore(":memory:") as store, SectionIndex(":memory:") as sections:
        report = await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, sections=sections,
                                         show_progress=False).run([tmp_path])
        assert report.files_indexed == 1
        [hit] = await BM25Retriever(store=store).retrieve("budget", k=1)
        [section] = await sections.resolve(hit)
        parent = await sections.get(hit.metadata["parent_id"])
    assert section.heading_path == ("Guide", "Budget") and section.text == ""
    assert parent is not None and parent.text[slice(*section.chunk_spans[0])] == "Budget"


@pytest.mark.anyio
async def test_the_heading_of_a_section_with_a_body_is_searchable_too(tmp_path: Path) -> None:
    """What was done already, kept: the SQLite store indexes a chunk's headings for BM25 beside its text."""
    (tmp_path / "notes.md").write_text("# Notes\n\n## Quarterly merger plan with Acme\n\nWe meet their board on Tuesday.\n")
    (tmp_path / "lunch.md").write_text("# Lunch\n\nSandwiches on Friday.\n")
    async with SQLiteVectorStore(":memory:") as store:
        await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False).run([tmp_path])
        [hit] = await BM25Retriever(store=store).retrieve("merger", k=5)
    assert hit.content == "We meet their board on Tuesday."  # the chunk is its body; the heading is not repeated


# ------------------------------------------------------- 26.2: large plain text streamed into the store

import fastrag.ingestion.pipeline as pipeline_module


def _stored(documents: list) -> list[tuple[str, str, dict]]:
    return sorted((d.id, d.content, dict(d.metadata)) for d in documents)


@pytest.mark.anyio
@pytest.mark.parametrize("megabytes", [0.3, 1.2, 2.6])
async def test_a_streamed_file_is_stored_exactly_as_the_whole_file_path_stores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, megabytes: float
) -> None:
    """Streamed in batches (every size streams here), a file's chunk ids, texts, offsets and metadata are
    those of the whole-file path; a "€" straddles the 1 MiB read block; re-indexing an unchanged file writes
    nothing, and a shorter version replaces every old chunk."""
    rng = random.Random(int(megabytes * 10))
    text = ""
    while len(text.encode()) < megabytes * 2**20:
        text += _words(rng, rng.randint(3, 500)) + rng.choice(("\n\n", " ", "\r\n\r\n", " €😀 "))
    data = text.encode("utf-8")
    cut = (1 << 20) - 1
    if len(data) > cut + 3:
        data = data[:cut] + "€".encode() + data[cut:]
    (tmp_path / "notes.txt").write_bytes(data)
    results = []
    for threshold in (10**12, 0):
        monkeypatch.setattr(pipeline_module, "_STREAM_BYTES", threshold)
        async with SQLiteVectorStore(str(tmp_path / f"s{threshold}.db")) as store:
            pipeline = IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False, batch_size=50)
            report = await pipeline.run([tmp_path / "notes.txt"])
            assert report.ok and report.files_indexed == 1
            results.append(_stored(await store.get()))
            if threshold == 0:
                again = await pipeline.run([tmp_path / "notes.txt"])
                assert again.files_unchanged == 1 and again.chunks_written == 0
                (tmp_path / "notes.txt").write_bytes(data[: len(data) // 3])
                shorter = await pipeline.run([tmp_path / "notes.txt"])
                assert shorter.files_indexed == 1
                assert {d.metadata["content_hash"] for d in await store.get()} == {
                    hashlib.sha256(data[: len(data) // 3]).hexdigest()}
                assert await store.count() == shorter.chunks_written
    assert results[0] == results[1] and len(results[0]) > 100


_MEASURE = r"""
import random, resource, sys, anyio
from pathlib import Path
from fastrag.ingestion import IngestionPipeline
from fastrag.testing.fakes import HashingEmbedder
from fastrag.vector_store.sqlite import SQLiteVectorStore

folder = Path(sys.argv[1])
rng = random.Random(3)
words = ("merger", "plan", "acme", "board", "quarterly", "a", "tuesday.", "solar", "inverter")
block = "\n\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(20, 300))) for _ in range(400)) + "\n\n"
with (folder / "big.txt").open("w") as handle:
    while handle.tell() < 40 * 2**20:
        handle.write(block)
del block

async def main():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with SQLiteVectorStore(str(folder / "index.db")) as store:
        report = await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False).run(
            [folder / "big.txt"])
    assert report.files_indexed == 1 and report.chunks_written > 50_000, report
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)

anyio.run(main)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in kilobytes on Linux only")
def test_indexing_a_40_mb_text_file_holds_a_bounded_window_not_the_file(tmp_path: Path) -> None:
    """Failed before: a file's chunks were embedded and written in one batch; indexing 40 MB of text grew
    the process by about 220 MB (60 MB: 330 MB). Streamed, it grows by a few batches of chunks (60 MB: 20 MB)."""
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    growth = int(done.stdout.split()[-1])
    assert growth < 80 * 2**20, f"indexing 40 MB of text grew the process by {growth:,} bytes"
