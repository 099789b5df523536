"""Parsing, chunking and the ingestion pipeline, against the in-memory fakes (no backend, no download)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from fastrag.errors import InvalidParameterError
from fastrag.filters import field
from fastrag.ingestion import (
    Chunker,
    FileKind,
    IngestionPipeline,
    IngestionReport,
    ParsedDocument,
    Section,
    file_kind,
    parse,
)
from fastrag.models import Document
from fastrag.protocols import LexicalStore, SupportsGet, VectorStore
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore

MARKDOWN = """\
# Install Guide

Read this first.

## Linux

Use the package manager.

### Debian

Run apt-get install fastrag.

## Windows

Download the installer.

```
# not a heading
echo done
```
"""

HTML = """\
<!doctype html>
<html><head><title>Page Title</title>
<style>body { color: red }</style>
<script>var secret = "do not index";</script>
</head>
<body>
<h1>Welcome</h1>
<p>First   paragraph
with a line break.</p>
<script>alert("nope")</script>
<h2>Details</h2>
<p>Details &amp; more.</p><ul><li>one</li><li>two</li></ul>
</body></html>
"""


class SpyStore(InMemoryStore):
    """Counts writes and deletes."""

    def __init__(self) -> None:
        super().__init__()
        self.upserted: list[str] = []
        self.deletes = 0

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        await super().upsert(documents, embeddings=embeddings)
        self.upserted.extend(doc.id for doc in documents)

    async def delete(self, *, ids=None, filter=None) -> int:  # noqa: A002
        removed = await super().delete(ids=ids, filter=filter)
        self.deletes += removed
        return removed


class TextOnlyStore:
    """A lexical store without get(): stands in for a separate BM25 backend."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()
        self.embeddings_seen: list[np.ndarray | None] = []

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        self.embeddings_seen.append(embeddings)
        await self.inner.upsert(documents)

    async def search_text(self, query: str, *, k: int, filter=None) -> list[Document]:  # noqa: A002
        return await self.inner.search_text(query, k=k, filter=filter)

    async def delete(self, *, ids=None, filter=None) -> int:  # noqa: A002
        return await self.inner.delete(ids=ids, filter=filter)

    async def count(self, *, filter=None) -> int:  # noqa: A002
        return await self.inner.count(filter=filter)


def write(root: Path, relative: str, content: str | bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def pipeline(store: InMemoryStore, **kwargs) -> IngestionPipeline:
    return IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False, **kwargs)


async def chunks_of(store: InMemoryStore, uri: str) -> list[Document]:
    return await store.get(filter=field("source_uri") == uri)


# ------------------------------------------------------------------------------------------ parsers


def test_file_kinds() -> None:
    assert file_kind("a/notes.txt") is FileKind.TEXT
    assert file_kind("README.MD") is FileKind.MARKDOWN
    assert file_kind("x.markdown") is FileKind.MARKDOWN
    assert file_kind("page.htm") is FileKind.HTML
    assert file_kind("data/corpus.jsonl") is FileKind.BEIR_CORPUS
    assert file_kind("queries.jsonl") is None
    assert file_kind("image.png") is None


def test_markdown_sections_follow_nested_headings() -> None:
    (doc,) = parse(MARKDOWN.encode(), source_uri="guide/install.md")
    assert doc.title == "Install Guide"
    assert doc.source_uri == doc.id == "guide/install.md"
    assert [s.heading_path for s in doc.sections] == [
        ("Install Guide",),
        ("Install Guide", "Linux"),
        ("Install Guide", "Linux", "Debian"),
        ("Install Guide", "Windows"),
    ]
    assert doc.sections[2].text == "Run apt-get install fastrag."
    windows = doc.sections[3].text
    assert "Download the installer." in windows and "# not a heading" in windows  # code is not a heading


def test_markdown_heading_text_is_plain_and_front_matter_dropped() -> None:
    text = "---\ntitle: ignored\n---\n\nIntro before headings.\n\n## The *fast* `path`\n\nBody.\n"
    (doc,) = parse(text.encode(), source_uri="notes.md")
    assert doc.title == "The fast path"
    assert doc.sections == (Section((), "Intro before headings."), Section(("The fast path",), "Body."))


def test_markdown_without_heading_is_titled_by_file_stem() -> None:
    (doc,) = parse(b"just text", source_uri="dir/my-notes.md")
    assert doc.title == "my-notes"


def test_html_drops_script_and_style_and_keeps_headings() -> None:
    (doc,) = parse(HTML.encode(), source_uri="site/index.html")
    assert doc.title == "Page Title"
    everything = " ".join(s.text for s in doc.sections)
    assert "secret" not in everything and "nope" not in everything and "color" not in everything
    assert [s.heading_path for s in doc.sections] == [("Welcome",), ("Welcome", "Details")]
    assert doc.sections[0].text == "First paragraph with a line break."
    assert doc.sections[1].text == "Details & more.\n\none\n\ntwo"


def test_html_title_falls_back_to_first_heading_then_stem() -> None:
    (with_heading,) = parse(b"<h2>Only Heading</h2><p>x</p>", source_uri="a.html")
    assert with_heading.title == "Only Heading"
    (bare,) = parse(b"<p>x</p>", source_uri="dir/bare-page.htm")
    assert bare.title == "bare-page"


def test_text_file_is_one_section_titled_by_stem() -> None:
    (doc,) = parse(b"\xef\xbb\xbfline one\r\n\r\nline two\r\n", source_uri="notes/todo.txt")
    assert doc.title == "todo"
    assert doc.sections == (Section((), "line one\n\nline two"),)


def test_undecodable_file_raises_ingestion_error_naming_it() -> None:
    from fastrag.errors import IngestionError

    with pytest.raises(IngestionError, match=r"latin\.txt.*UTF-8"):
        parse("café".encode("latin-1"), source_uri="latin.txt")


def test_beir_corpus_yields_one_document_per_line() -> None:
    lines = [
        {"_id": "d1", "title": "First", "text": "Alpha text."},
        {"_id": 2, "title": "", "text": "Beta text."},
    ]
    data = ("\n".join(json.dumps(line) for line in lines) + "\n\n").encode()
    docs = parse(data, source_uri="scifact/corpus.jsonl")
    assert [(d.id, d.source_uri, d.title) for d in docs] == [
        ("d1", "scifact/corpus.jsonl#d1", "First"),
        ("2", "scifact/corpus.jsonl#2", ""),
    ]
    assert docs[0].sections == (Section((), "Alpha text."),)


def test_beir_corpus_bad_line_names_file_and_line() -> None:
    from fastrag.errors import IngestionError

    with pytest.raises(IngestionError, match=r"corpus\.jsonl, line 2"):
        parse(b'{"_id": "a", "text": "x"}\n{not json}\n', source_uri="corpus.jsonl")


def test_parsed_document_is_frozen() -> None:
    doc = ParsedDocument(source_uri="a.txt", title="a", sections=[Section((), "x")])
    assert isinstance(doc.sections, tuple)
    with pytest.raises(AttributeError):
        doc.title = "b"  # type: ignore[misc]


# ----------------------------------------------------------------------------------------- chunking


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (-5, 0), (10, 10), (10, -1), (10, 11)])
def test_chunker_rejects_bad_sizes(size: int, overlap: int) -> None:
    with pytest.raises(InvalidParameterError):
        Chunker(chunk_size=size, chunk_overlap=overlap)


def test_chunker_packs_whole_paragraphs_within_a_section() -> None:
    paragraphs = ["a" * 30, "b" * 30, "c" * 30, "d" * 30]
    section = Section(("H",), "\n\n".join(paragraphs))
    chunks = Chunker(chunk_size=70, chunk_overlap=10).chunk_section(section)
    assert [c.text for c in chunks] == [f"{'a' * 30}\n\n{'b' * 30}", f"{'c' * 30}\n\n{'d' * 30}"]
    for chunk in chunks:
        assert section.text[chunk.start : chunk.end] == chunk.text
        assert chunk.heading_path == ("H",)


def test_chunker_never_merges_across_headings() -> None:
    doc = ParsedDocument(
        source_uri="x.md", title="x", sections=[Section(("A",), "short a"), Section(("B",), "short b")]
    )
    chunks = Chunker(chunk_size=1000).chunk(doc)
    assert [(c.text, c.heading_path, c.section_index) for c in chunks] == [
        ("short a", ("A",), 0),
        ("short b", ("B",), 1),
    ]


def test_long_paragraph_splits_at_sentences_with_overlap() -> None:
    text = "One two three. Four five six. Seven eight nine. Ten eleven twelve."
    chunks = Chunker(chunk_size=32, chunk_overlap=10).chunk_section(Section((), text))
    assert chunks[0].text == "One two three. Four five six."  # ends at a sentence, not mid-sentence
    for chunk in chunks:
        assert len(chunk.text) <= 32
        assert text[chunk.start : chunk.end] == chunk.text
    for first, second in zip(chunks, chunks[1:]):
        assert 0 < first.end - second.start <= 10  # overlapping, by at most chunk_overlap characters
    assert chunks[-1].text.endswith("Ten eleven twelve.")


def test_long_sentence_splits_at_whitespace_and_long_word_hard() -> None:
    words = " ".join(f"word{i}" for i in range(40))
    chunks = Chunker(chunk_size=50, chunk_overlap=0).chunk_section(Section((), words))
    assert all(len(c.text) <= 50 for c in chunks)
    assert " ".join(c.text for c in chunks) == words  # cut only at spaces, nothing lost or repeated
    hard = Chunker(chunk_size=10, chunk_overlap=0).chunk_section(Section((), "x" * 25))
    assert [c.text for c in hard] == ["x" * 10, "x" * 10, "x" * 5]


# ---------------------------------------------------------------------------------------- the fakes



@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """source_uri is relative to the working directory: run each test from its tmp_path."""
    monkeypatch.chdir(tmp_path)

@pytest.mark.anyio
async def test_in_memory_store_conforms_and_ranks_copies() -> None:
    store = InMemoryStore()
    assert isinstance(store, VectorStore) and isinstance(store, LexicalStore) and isinstance(store, SupportsGet)
    docs = [Document("a", "red apple pie", {"kind": "fruit"}), Document("b", "green apple", {"kind": "fruit"}),
            Document("c", "tax law", {"kind": "law"})]  # fmt: skip
    vectors = await HashingEmbedder().embed_documents([d.content for d in docs])
    await store.upsert(docs, embeddings=vectors)
    hits = await store.search_text("red apple", k=10)
    assert [h.id for h in hits] == ["a", "b"]  # "c" shares no term and is never returned
    assert hits[0].score > hits[1].score > 0 and hits[0].rank == 0 and docs[0].score is None
    nearest = await store.search_vector(vectors[2], k=1)
    assert nearest[0].id == "c" and nearest[0].score == pytest.approx(1.0)
    assert [d.id for d in await store.search_vector(vectors[2], k=5, filter=field("kind") == "fruit")] == ["a", "b"]
    assert await store.count(filter=field("kind") == "fruit") == 2
    assert await store.delete(filter=field("kind") == "law") == 1
    assert [d.id for d in await store.get()] == ["a", "b"]


# ----------------------------------------------------------------------------------------- pipeline


@pytest.mark.anyio
async def test_markdown_is_chunked_per_section_with_metadata(tmp_path: Path) -> None:
    write(tmp_path, "docs/guide/install.md", MARKDOWN)
    store = InMemoryStore()
    report = await pipeline(store).run([tmp_path / "docs"])
    assert report == IngestionReport(files_indexed=1, chunks_written=4, languages={"en": 4})  # detected (issue 25.4)
    chunks = await store.get()
    assert [c.id for c in chunks] == [f"docs/guide/install.md#{i}" for i in range(4)]
    by_index = {c.metadata["chunk_index"]: c for c in chunks}
    debian = by_index[2]
    assert debian.content == "Run apt-get install fastrag."
    assert debian.metadata["headings"] == ["Install Guide", "Linux", "Debian"]
    assert debian.metadata["title"] == "Install Guide"
    assert debian.metadata["source_uri"] == debian.metadata["parent_id"] == "docs/guide/install.md"
    import hashlib

    assert debian.metadata["content_hash"] == hashlib.sha256(MARKDOWN.encode()).hexdigest()
    assert debian.metadata["chunker"] == Chunker().fingerprint
    assert set(debian.metadata) == {
        "source_uri", "title", "chunk_index", "parent_id", "content_hash", "headings", "chunker",
        "section_index", "section_start", "section_end", "language",
    }


@pytest.mark.anyio
async def test_embedding_text_is_title_plus_chunk(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# Cats\n\nThey purr.\n")

    texts: list[str] = []

    class RecordingEmbedder(HashingEmbedder):
        async def embed_documents(self, batch):
            texts.extend(batch)
            return await super().embed_documents(batch)

    store = InMemoryStore()
    await IngestionPipeline(embedder=RecordingEmbedder(), vector_store=store, show_progress=False).run([tmp_path])
    assert texts == ["Cats\nThey purr."]
    assert (await store.get())[0].content == "They purr."


@pytest.mark.anyio
async def test_html_ingestion_drops_script_and_uses_title(tmp_path: Path) -> None:
    write(tmp_path, "index.html", HTML)
    store = InMemoryStore()
    await pipeline(store).run([tmp_path])
    chunks = await store.get()
    assert {c.metadata["title"] for c in chunks} == {"Page Title"}
    assert not any("secret" in c.content or "alert" in c.content for c in chunks)


@pytest.mark.anyio
async def test_ids_are_deterministic_and_uris_relative_posix(tmp_path: Path) -> None:
    write(tmp_path, "root/sub/deeper/page.txt", "hello")
    write(tmp_path, "single.txt", "world")
    first, second = InMemoryStore(), InMemoryStore()
    for store in (first, second):
        await pipeline(store).run([tmp_path / "root", tmp_path / "single.txt"])
    ids = [d.id for d in await first.get()]
    assert ids == ["root/sub/deeper/page.txt#0", "single.txt#0"]
    assert ids == [d.id for d in await second.get()]


@pytest.mark.anyio
async def test_hidden_files_and_folders_are_not_walked(tmp_path: Path) -> None:
    write(tmp_path, ".git/notes.txt", "hidden folder")
    write(tmp_path, ".secret.md", "hidden file")
    write(tmp_path, "visible.md", "shown")
    store = InMemoryStore()
    report = await pipeline(store).run([tmp_path])
    assert report.files_indexed == 1
    assert [d.source_uri for d in await store.get()] == ["visible.md"]


@pytest.mark.anyio
async def test_reindexing_an_unchanged_file_writes_nothing(tmp_path: Path) -> None:
    write(tmp_path, "a.md", MARKDOWN)
    write(tmp_path, "b.txt", "plain")
    store = SpyStore()
    await pipeline(store).run([tmp_path])
    assert len(store.upserted) == 5
    store.upserted.clear()
    report = await pipeline(store).run([tmp_path])
    assert report.files_unchanged == 2 and report.files_indexed == 0 and report.chunks_written == 0
    assert store.upserted == [] and store.deletes == 0


@pytest.mark.anyio
async def test_changed_shorter_file_leaves_no_stale_chunks(tmp_path: Path) -> None:
    long_text = "\n\n".join(f"Paragraph {i} " + "word " * 30 for i in range(6))
    path = write(tmp_path, "doc.txt", long_text)
    write(tmp_path, "other.txt", "untouched")
    store = SpyStore()
    chunker = Chunker(chunk_size=200, chunk_overlap=20)
    await pipeline(store, chunker=chunker).run([tmp_path])
    assert len(await chunks_of(store, "doc.txt")) == 6
    path.write_text("Now a single short paragraph.", encoding="utf-8")
    store.upserted.clear()
    report = await pipeline(store, chunker=chunker).run([tmp_path])
    assert report.files_indexed == 1 and report.files_unchanged == 1
    remaining = await chunks_of(store, "doc.txt")
    assert [(d.id, d.content) for d in remaining] == [("doc.txt#0", "Now a single short paragraph.")]
    assert store.upserted == ["doc.txt#0"]
    assert len(await chunks_of(store, "other.txt")) == 1


@pytest.mark.anyio
async def test_interrupted_previous_run_is_redone(tmp_path: Path) -> None:
    write(tmp_path, "doc.txt", "\n\n".join(f"para {i} " + "x " * 40 for i in range(4)))
    store = InMemoryStore()
    chunker = Chunker(chunk_size=100, chunk_overlap=0)
    await pipeline(store, chunker=chunker).run([tmp_path])
    await store.delete(ids=["doc.txt#3"])  # as if the last batch never landed
    report = await pipeline(store, chunker=chunker).run([tmp_path])
    assert report.files_indexed == 1
    assert await store.count() == 4


@pytest.mark.anyio
async def test_prune_removes_deleted_files_chunks(tmp_path: Path) -> None:
    keep = write(tmp_path, "keep.md", "# Keep\n\nstays")
    gone = write(tmp_path, "sub/gone.md", "# Gone\n\nwill be deleted")
    store = InMemoryStore()
    await pipeline(store).run([tmp_path])
    foreign = Document("manual", "written by hand", {"source_uri": "elsewhere"})
    await store.upsert([foreign], embeddings=await HashingEmbedder().embed_documents([foreign.content]))
    gone.unlink()
    report = await pipeline(store).run([tmp_path])
    assert report.files_pruned == 0 and await store.count() == 3  # no prune unless asked
    report = await pipeline(store).run([tmp_path], prune=True)
    assert report.files_pruned == 1 and report.files_unchanged == 1
    assert sorted(d.id for d in await store.get()) == ["keep.md#0", "manual"]  # non-ingested docs untouched
    assert keep.exists()


@pytest.mark.anyio
async def test_prune_only_touches_the_folders_it_was_given(tmp_path: Path) -> None:
    write(tmp_path, "docs/a.md", "# A\n\nfirst folder")
    gone = write(tmp_path, "notes/b.md", "# B\n\nsecond folder")
    write(tmp_path, "notes/c.md", "# C\n\nstays")
    store = InMemoryStore()
    await pipeline(store).run([tmp_path / "docs", tmp_path / "notes"])
    gone.unlink()
    report = await pipeline(store).run([tmp_path / "notes"], prune=True)
    # docs/ was not named in this run: its chunks survive; notes/b.md is gone and is pruned
    assert report.files_pruned == 1
    assert sorted(d.id for d in await store.get()) == ["docs/a.md#0", "notes/c.md#0"]


@pytest.mark.anyio
async def test_prune_keeps_chunks_of_files_that_failed_to_parse(tmp_path: Path) -> None:
    path = write(tmp_path, "doc.txt", "good text")
    store = InMemoryStore()
    await pipeline(store).run([tmp_path])
    path.write_bytes(b"\xff\xfe broken")
    report = await pipeline(store).run([tmp_path], prune=True)
    assert len(report.errors) == 1 and report.files_pruned == 0
    assert [d.content for d in await store.get()] == ["good text"]


@pytest.mark.anyio
async def test_unsupported_files_are_skipped_and_reported(tmp_path: Path) -> None:
    write(tmp_path, "image.png", b"\x89PNG")
    write(tmp_path, "queries.jsonl", "{}")
    write(tmp_path, "ok.txt", "fine")
    report = await pipeline(InMemoryStore()).run([tmp_path])
    assert report.files_skipped == 2 and report.files_indexed == 1 and report.ok
    assert sorted(Path(p).name for p in report.skipped) == ["image.png", "queries.jsonl"]


@pytest.mark.anyio
async def test_undecodable_file_is_reported_and_others_are_indexed(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "first")
    bad = write(tmp_path, "b.txt", "caf\xe9".encode("latin-1"))
    write(tmp_path, "c.md", "# C\n\nthird")
    store = InMemoryStore()
    report = await pipeline(store).run([tmp_path, tmp_path / "missing"])
    assert report.files_indexed == 2 and not report.ok
    assert [e.path for e in report.errors] == [str(tmp_path / "missing"), str(bad)]
    assert "UTF-8" in report.errors[1].message and "b.txt" in report.errors[1].message
    assert sorted(d.source_uri for d in await store.get()) == ["a.txt", "c.md"]


@pytest.mark.anyio
async def test_beir_corpus_ingestion(tmp_path: Path) -> None:
    corpus = [
        {"_id": "4983", "title": "White matter", "text": "Diffusion tensor imaging of newborn brains."},
        {"_id": "5836", "title": "Bone", "text": "Osteoclasts resorb bone tissue."},
        {"_id": "7912", "title": "Empty", "text": ""},
    ]
    path = write(tmp_path, "scifact/corpus.jsonl", "\n".join(json.dumps(line) for line in corpus))
    store = SpyStore()
    report = await pipeline(store).run([tmp_path])
    assert report.files_indexed == 1 and report.chunks_written == 2
    docs = await store.get()
    assert [d.id for d in docs] == ["scifact/corpus.jsonl#4983#0", "scifact/corpus.jsonl#5836#0"]
    assert docs[1].metadata["parent_id"] == "5836"
    assert docs[1].metadata["source_uri"] == "scifact/corpus.jsonl#5836"
    assert docs[1].metadata["title"] == "Bone"
    hits = await store.search_text("osteoclasts bone", k=1)
    assert hits[0].metadata["parent_id"] == "5836"

    store.upserted.clear()
    again = await pipeline(store).run([path])  # named directly, the file keeps its cwd-relative uri
    assert again.files_unchanged == 1 and store.upserted == []
    store.upserted.clear()
    unchanged = await pipeline(store).run([tmp_path])
    assert unchanged.files_unchanged == 1 and store.upserted == []

    path.write_text(json.dumps(corpus[0]), encoding="utf-8")  # 5836 removed from the corpus
    await pipeline(store).run([tmp_path])
    assert [d.metadata["parent_id"] for d in await store.get(filter=field("source_uri").starts_with("scifact/"))] == [
        "4983"
    ]


@pytest.mark.anyio
async def test_separate_lexical_store_receives_the_same_chunks_without_vectors(tmp_path: Path) -> None:
    write(tmp_path, "a.md", MARKDOWN)
    vectors, text = InMemoryStore(), TextOnlyStore()
    await pipeline(vectors, lexical_store=text).run([tmp_path])
    assert await vectors.count() == await text.count() == 4
    assert text.embeddings_seen == [None]
    report = await pipeline(vectors, lexical_store=text).run([tmp_path])
    assert report.files_unchanged == 1
    write(tmp_path, "a.md", "# Short now\n\nonly this")
    await pipeline(vectors, lexical_store=text).run([tmp_path])
    assert await vectors.count() == await text.count() == 1


@pytest.mark.anyio
async def test_same_store_for_both_roles_is_written_once(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "hello")
    store = SpyStore()
    await pipeline(store, lexical_store=store).run([tmp_path])
    assert store.upserted == ["a.txt#0"]


@pytest.mark.anyio
async def test_batches_span_files(tmp_path: Path) -> None:
    for i in range(7):
        write(tmp_path, f"f{i}.txt", f"file {i}")

    sizes: list[int] = []

    class BatchSpy(SpyStore):
        async def upsert(self, documents, *, embeddings=None):
            sizes.append(len(documents))
            await super().upsert(documents, embeddings=embeddings)

    report = await pipeline(BatchSpy(), batch_size=3).run([tmp_path])
    assert report.chunks_written == 7 and sizes == [3, 3, 1]


@pytest.mark.anyio
async def test_progress_bar_can_be_forced(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "hello")
    store = InMemoryStore()
    report = await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=True).run(
        [tmp_path]
    )
    assert report.files_indexed == 1


def test_pipeline_rejects_bad_batch_size() -> None:
    with pytest.raises(InvalidParameterError):
        IngestionPipeline(embedder=HashingEmbedder(), vector_store=InMemoryStore(), batch_size=0)


@pytest.mark.anyio
async def test_prune_needs_a_listable_store(tmp_path: Path) -> None:
    from fastrag.errors import ConfigurationError

    class NoGet(TextOnlyStore):
        async def search_vector(self, embedding, *, k, filter=None):  # noqa: A002
            return []

    with pytest.raises(ConfigurationError):
        await IngestionPipeline(embedder=HashingEmbedder(), vector_store=NoGet(), show_progress=False).run(
            [tmp_path], prune=True
        )


@pytest.mark.anyio
async def test_store_errors_surface_as_themselves_not_as_exception_groups(tmp_path: Path) -> None:
    from fastrag.errors import DimensionMismatchError

    write(tmp_path, "a.txt", "hello")
    store = InMemoryStore(dimension=8)  # the embedder gives 64
    with pytest.raises(DimensionMismatchError):
        await pipeline(store).run([tmp_path])
    with pytest.raises(DimensionMismatchError):
        await pipeline(store, lexical_store=TextOnlyStore()).run([tmp_path])


@pytest.mark.anyio
async def test_embedder_errors_surface_as_themselves(tmp_path: Path) -> None:
    from fastrag.errors import EmbeddingError

    class Broken(HashingEmbedder):
        async def embed_documents(self, texts):
            raise EmbeddingError("model exploded")

    write(tmp_path, "a.txt", "hello")
    with pytest.raises(EmbeddingError, match="exploded"):
        await IngestionPipeline(embedder=Broken(), vector_store=InMemoryStore(), show_progress=False).run([tmp_path])


@pytest.mark.anyio
async def test_new_chunker_settings_reindex_an_unchanged_file(tmp_path: Path) -> None:
    write(tmp_path, "doc.txt", " ".join(f"word{i}." for i in range(200)))
    write(tmp_path, "corpus.jsonl", json.dumps({"_id": "d", "text": " ".join(f"term{i}." for i in range(200))}))
    store, text_only = InMemoryStore(), TextOnlyStore()  # one probed by id, one by count and filter

    async def index(size: int, overlap: int = 0) -> IngestionReport:
        chunker = Chunker(chunk_size=size, chunk_overlap=overlap)
        return await pipeline(store, lexical_store=text_only, chunker=chunker).run([tmp_path])

    await index(300)
    small = await store.count()
    report = await index(600)
    assert report.files_indexed == 2
    assert 0 < await store.count() == await text_only.count() < small
    assert all(len(d.content) <= 600 for d in await store.get() + await text_only.inner.get())
    report = await index(600, 50)
    assert report.files_indexed == 2  # same chunk count, different text: still re-indexed


@pytest.mark.anyio
async def test_a_file_named_twice_is_indexed_once(tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", "hello")
    store = SpyStore()
    report = await pipeline(store).run([tmp_path, path])
    assert report.files_indexed == 1 and store.upserted == ["a.txt#0"]


@pytest.mark.anyio
async def test_prune_of_the_working_directory_keeps_files_outside_it(tmp_path: Path, monkeypatch) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    write(here, "h.md", "# H\n\nhere")
    write(elsewhere, "e.md", "# E\n\nkiwi")
    store = InMemoryStore()
    monkeypatch.chdir(here)
    await pipeline(store).run([elsewhere])  # stored with an absolute uri: outside the working directory
    report = await pipeline(store).run([Path(".")], prune=True)
    assert report.files_pruned == 0
    assert sorted(d.metadata["source_uri"] for d in await store.get()) == [f"{elsewhere.resolve().as_posix()}/e.md", "h.md"]


# ------------------------------------------------------------------------------ hostile paths (issue 13.9)


def hostile_tree(root: Path) -> dict[str, str]:
    """Regular files beside a FIFO, device symlinks, a symlink loop, a broken symlink, a folder symlink and a
    file whose name is not UTF-8; returns the regular files' names -> text."""
    import os

    good = {f"good{i}.md": f"# Good {i}\n\nRegular file number {i} about pelicans.\n" for i in range(3)}
    for name, text in good.items():
        write(root, name, text)
    os.mkfifo(root / "p.md")
    os.symlink("/dev/zero", root / "zero.md")
    os.symlink("/dev/urandom", root / "random.txt")
    os.symlink("loop.md", root / "loop.md")
    os.symlink("nowhere.md", root / "broken.md")
    (root / "real_folder").mkdir()
    write(root, "real_folder/inside.txt", "inside the real folder")
    os.symlink("real_folder", root / "linked_folder")
    raw = os.fsencode(str(root)) + b"/caf\xe9.md"
    with open(raw, "wb") as handle:
        handle.write(b"# Cafe\n\nA file whose name is Latin-1, not UTF-8.\n")
    good["caf\\xe9.md"] = "A file whose name is Latin-1, not UTF-8."
    good["real_folder/inside.txt"] = "inside the real folder"
    return good


@pytest.mark.anyio
@pytest.mark.timeout(60)  # a FIFO or /dev/zero read would hang or exhaust memory instead of failing
async def test_only_regular_files_are_read_and_every_skipped_path_is_named(tmp_path: Path) -> None:
    good = hostile_tree(tmp_path)
    store = InMemoryStore()
    report = await pipeline(store).run([tmp_path])
    assert report.ok, report.errors
    assert report.files_indexed == len(good)
    stored = {Path(d.source_uri).relative_to(tmp_path).as_posix() if d.source_uri.startswith("/") else d.source_uri
              for d in await store.get()}
    assert stored == set(good)
    reasons = {Path(s.path).name: s.reason for s in report.skipped_files}
    assert set(reasons) == {"p.md", "zero.md", "random.txt", "loop.md", "broken.md", "linked_folder"}
    assert "FIFO" in reasons["p.md"] and "not a regular file" in reasons["p.md"]
    assert "/dev/zero" in reasons["zero.md"] and "character device" in reasons["zero.md"]
    assert "/dev/urandom" in reasons["random.txt"]
    assert reasons["loop.md"] == "symlink loop"
    assert "broken symlink" in reasons["broken.md"]
    assert "not followed" in reasons["linked_folder"]
    assert report.files_skipped == len(report.skipped) == 6


@pytest.mark.anyio
async def test_a_file_over_the_size_limit_is_skipped_with_the_reason_and_the_others_indexed(tmp_path: Path) -> None:
    write(tmp_path, "big.txt", "x" * 5000)
    write(tmp_path, "small.txt", "small")
    store = InMemoryStore()
    report = await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, max_file_bytes=1000).run([tmp_path])
    assert report.files_indexed == 1 and [d.content for d in await store.get()] == ["small"]
    (skipped,) = report.skipped_files
    assert skipped.path.endswith("big.txt") and "size limit" in skipped.reason and "5,000 bytes" in skipped.reason
    with pytest.raises(InvalidParameterError):
        IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, max_file_bytes=0)


@pytest.mark.anyio
async def test_empty_files_on_a_first_run_are_skipped_as_empty_not_unchanged(tmp_path: Path) -> None:
    write(tmp_path, "empty.md", "")
    write(tmp_path, "blank.txt", "  \n\n ")
    write(tmp_path, "full.txt", "some text")
    report = await pipeline(InMemoryStore()).run([tmp_path])
    assert (report.files_indexed, report.files_unchanged, report.files_skipped) == (1, 0, 2)
    assert {Path(s.path).name: s.reason for s in report.skipped_files} == {
        "blank.txt": "no text to index (empty)", "empty.md": "no text to index (empty)"
    }


@pytest.mark.anyio
async def test_a_file_emptied_since_indexing_loses_its_chunks(tmp_path: Path) -> None:
    path = write(tmp_path, "doc.txt", "text that will go")
    store = InMemoryStore()
    await pipeline(store).run([tmp_path])
    path.write_text("", encoding="utf-8")
    report = await pipeline(store).run([tmp_path])
    assert await store.count() == 0
    # skipped as empty, as every later run says too, not "indexed" one run and "skipped" the next
    assert (report.files_indexed, report.files_skipped) == (0, 1)
    assert report.skipped_files[0].reason.startswith("no text to index (empty)")
    again = await pipeline(store).run([tmp_path])
    assert (again.files_indexed, again.files_unchanged, again.files_skipped) == (0, 0, 1)


@pytest.mark.anyio
async def test_deleted_files_are_counted_when_asked_and_removed_only_by_prune(tmp_path: Path) -> None:
    write(tmp_path, "keep.txt", "kept")
    gone = write(tmp_path, "gone.txt", "deleted soon")
    store = InMemoryStore()
    await pipeline(store).run([tmp_path])
    gone.unlink()
    report = await pipeline(store).run([tmp_path], report_deleted=True)
    assert report.files_deleted == 1 and await store.count() == 2  # still searchable
    assert (await pipeline(store).run([tmp_path])).files_deleted == 0  # not counted unless asked
    pruned = await pipeline(store).run([tmp_path], prune=True)
    assert pruned.files_pruned == 1 and await store.count() == 1


@pytest.mark.anyio
async def test_the_progress_bar_counts_bytes_files_and_chunks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 16.8: a bar of files alone sat still on one large file; it now shows bytes (rate, ETA) and chunks
    monkeypatch.setenv("COLUMNS", "160")
    write(tmp_path, "a.txt", "word " * 400)
    write(tmp_path, "b.txt", "other words")
    await IngestionPipeline(embedder=HashingEmbedder(), vector_store=InMemoryStore(), show_progress=True,
                            chunker=Chunker(chunk_size=200, chunk_overlap=0)).run([tmp_path])
    drawn = capsys.readouterr().err
    assert "2.0/2.0 kB" in drawn and "2/2 files" in drawn
    assert re.search(r"\b11 chunks \([\d,]+/s\)", drawn), drawn


class LockedStore(InMemoryStore):
    """Its second write fails as SQLite does when another writer holds the lock past the busy timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def upsert(self, documents: Sequence[Document], *, embeddings: np.ndarray | None = None) -> None:
        self.writes += 1
        if self.writes == 2:
            from fastrag.errors import TransientBackendError

            raise TransientBackendError("SQLite database is busy: database is locked", store="locked.db")
        await super().upsert(documents, embeddings=embeddings)


@pytest.mark.anyio
async def test_a_store_write_failure_surfaces_as_the_stores_error_not_a_broken_queue(tmp_path: Path) -> None:
    # issue 13.4: the writer failed while the producer waited on the queue, and the run raised a bare
    # anyio.BrokenResourceError (no message, no cause): the CLI printed a traceback and exited 1, not 3
    from fastrag.errors import TransientBackendError

    for i in range(40):
        write(tmp_path, f"f{i:02d}.txt", f"file number {i}")
    with pytest.raises(TransientBackendError, match="database is locked") as info:
        await pipeline(LockedStore(), batch_size=1).run([tmp_path])
    assert info.value.store == "locked.db"


class SizeRecordingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    async def embed_documents(self, texts):  # noqa: ANN001, ANN201
        self.calls.append(len(texts))
        return await super().embed_documents(texts)


@pytest.mark.anyio
async def test_one_large_file_is_embedded_in_slices_so_progress_moves_within_it(tmp_path: Path) -> None:
    # issue 16.8: a large file's chunks travel in one batch (one upsert); embedding them in one call left the
    # bar still for as long as the file took. They are embedded 1,024 at a time, and stored the same.
    write(tmp_path, "big.txt", "\n\n".join(f"paragraph {i} " + "word " * 30 for i in range(2500)))
    embedder, store = SizeRecordingEmbedder(), SpyStore()
    pipe = IngestionPipeline(embedder=embedder, vector_store=store, show_progress=False,
                             chunker=Chunker(chunk_size=200, chunk_overlap=0))
    report = await pipe.run([tmp_path])
    assert report.chunks_written == len(store.upserted) > 2048
    assert max(embedder.calls) == 1024 and len(embedder.calls) >= 3
    # each chunk is stored with its own vector, past the first slice too: searching by it finds it first
    for chunk_id in (store.upserted[5], store.upserted[2100]):
        (chunk,) = await store.get(ids=[chunk_id])
        query = await HashingEmbedder().embed_query(f"{chunk.metadata['title']}\n{chunk.content}")
        hits = await store.search_vector(query, k=20)
        assert any(hit.id == chunk_id and hit.score == pytest.approx(1.0) for hit in hits)
