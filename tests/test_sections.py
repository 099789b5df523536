"""SectionIndex: hits traced back to the sections of the documents they were cut from.

Everything runs against the in-memory fakes and a SQLite file in tmp_path (no backend, no download). The
expected section bodies below are written out by hand from GUIDE, not computed by the code under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fastrag.errors import BackendUnavailableError, InvalidParameterError, SectionNotFoundError
from fastrag.filters import field
from fastrag.ingestion import Chunker, IngestionPipeline, parse_markdown
from fastrag.models import Document
from fastrag.retrieval import SectionIndex, SourceSection, merge_chunks
from fastrag.retrieval.sections import MERGED_FROM, SECTION_END, SECTION_INDEX, SECTION_START
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore

GUIDE = """\
Read me before anything else.

# Install Guide

Welcome to the guide.

## Linux

### Debian

Run apt-get install fastrag.

### Fedora

Run dnf install fastrag.

## Windows

Download the installer.

# FAQ

Ask on the forum.
"""

# heading path -> the section's own body, as a reader of GUIDE sees it ("## Linux" has none of its own)
BODIES = {
    (): "Read me before anything else.",
    ("Install Guide",): "Welcome to the guide.",
    ("Install Guide", "Linux"): "",
    ("Install Guide", "Linux", "Debian"): "Run apt-get install fastrag.",
    ("Install Guide", "Linux", "Fedora"): "Run dnf install fastrag.",
    ("Install Guide", "Windows"): "Download the installer.",
    ("FAQ",): "Ask on the forum.",
}
URI = "docs/guide.md"


def pipeline(store: InMemoryStore, sections: SectionIndex, **kwargs) -> IngestionPipeline:
    return IngestionPipeline(
        embedder=HashingEmbedder(), vector_store=store, sections=sections, show_progress=False, **kwargs
    )


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding docs/guide.md, so chunks are named ``docs/guide.md#<n>``."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path, URI, GUIDE)
    return tmp_path


async def ingest(store: InMemoryStore, sections: SectionIndex, **kwargs) -> list[Document]:
    report = await pipeline(store, sections, **kwargs).run(["docs"])
    assert report.ok, report.errors
    return await store.get(filter=field("source_uri") == URI)


def chunk_under(chunks: list[Document], *path: str) -> Document:
    (chunk,) = [c for c in chunks if tuple(c.metadata["headings"]) == path]
    return chunk


# ------------------------------------------------------------------------------------- resolving


@pytest.mark.anyio
async def test_each_chunk_resolves_to_its_own_section_with_provenance(workdir: Path) -> None:
    store = InMemoryStore()
    async with SectionIndex(":memory:") as index:
        chunks = await ingest(store, index)
        assert len(chunks) == 6  # one per section with a body
        parent = await index.get(URI)
        assert parent is not None
        for chunk in chunks:
            (section,) = await index.resolve(chunk)
            path = tuple(chunk.metadata["headings"])
            assert section.heading_path == path
            assert section.text == BODIES[path]
            assert section.source_uri == URI and section.parent_id == URI
            assert section.title == "Install Guide"
            assert section.chunk_ids == (chunk.id,)
            # document-scoped spans: the section's body and the chunk, in the normalised text
            assert parent.text[section.start : section.end] == BODIES[path]
            (span,) = section.chunk_spans
            assert parent.text[span[0] : span[1]] == chunk.content


@pytest.mark.anyio
async def test_ancestors_are_the_enclosing_headings_outermost_first(workdir: Path) -> None:
    async with SectionIndex() as index:
        chunks = await ingest(InMemoryStore(), index)
        (debian,) = await index.resolve(chunk_under(chunks, "Install Guide", "Linux", "Debian"))
        assert [a.heading_path for a in debian.ancestors] == [("Install Guide",), ("Install Guide", "Linux")]
        assert [a.text for a in debian.ancestors] == ["Welcome to the guide.", ""]  # Linux has no body
        assert all(a.chunk_ids == () and a.ancestors == () for a in debian.ancestors)

        (windows,) = await index.resolve(chunk_under(chunks, "Install Guide", "Windows"))
        assert [a.heading for a in windows.ancestors] == ["Install Guide"]
        (faq,) = await index.resolve(chunk_under(chunks, "FAQ"))
        assert faq.ancestors == ()
        (intro,) = await index.resolve(chunk_under(chunks))  # text before the first heading encloses nothing
        assert intro.heading_path == () and intro.depth == 0 and intro.ancestors == ()

        (bare,) = await index.resolve(chunk_under(chunks, "Install Guide", "Linux", "Debian"), ancestors=False)
        assert bare.ancestors == () and bare.heading_path == debian.heading_path


@pytest.mark.anyio
async def test_the_normalised_document_is_a_tree_of_every_heading(workdir: Path) -> None:
    async with SectionIndex() as index:
        await ingest(InMemoryStore(), index)
        parent = await index.get(URI)
    assert parent is not None
    assert [s.heading_path for s in parent.sections] == list(BODIES)  # document order, Linux included
    assert [s.text for s in parent.sections] == list(BODIES.values())
    assert [s.depth for s in parent.sections] == [0, 1, 2, 3, 3, 2, 1]
    by_path = {s.heading_path: s for s in parent.sections}
    linux = by_path[("Install Guide", "Linux")]
    assert [c.heading for c in parent.children(linux)] == ["Debian", "Fedora"]
    assert [c.heading for c in parent.children(by_path[("Install Guide",)])] == ["Linux", "Windows"]
    assert linux.parsed_index is None  # no parser section of its own
    assert "### Debian\n\nRun apt-get install fastrag." in parent.text
    assert len({s.id for s in parent.sections}) == len(parent.sections)
    assert all(s.id.startswith(f"{URI}#") for s in parent.sections)
    assert parent.section(linux.id) == linux
    with pytest.raises(SectionNotFoundError):
        parent.section("nope")


@pytest.mark.anyio
async def test_chunks_of_a_split_section_resolve_to_it_at_their_own_offsets(workdir: Path) -> None:
    sentences = " ".join(f"Sentence number {i} explains one more step." for i in range(12))
    write(workdir, "docs/long.md", f"# Long\n\n## Steps\n\n{sentences}\n\n## After\n\nDone.\n")
    store = InMemoryStore()
    async with SectionIndex() as index:
        await pipeline(store, index, chunker=Chunker(chunk_size=120, chunk_overlap=30)).run(["docs/long.md"])
        chunks = await store.get(filter=field("source_uri") == "docs/long.md")
        steps = [c for c in chunks if c.metadata["headings"] == ["Long", "Steps"]]
        assert len(steps) > 2
        parent = await index.get("docs/long.md")
        assert parent is not None
        for chunk in steps:
            (section,) = await index.resolve(chunk)
            assert section.heading_path == ("Long", "Steps") and section.text == sentences
            (span,) = section.chunk_spans
            assert parent.text[span[0] : span[1]] == chunk.content


# ----------------------------------------------------------------------------------------- merged


@pytest.mark.anyio
async def test_a_merged_chunk_resolves_to_several_sections_in_document_order(workdir: Path) -> None:
    async with SectionIndex() as index:
        chunks = await ingest(InMemoryStore(), index)
        windows = chunk_under(chunks, "Install Guide", "Windows")
        fedora = chunk_under(chunks, "Install Guide", "Linux", "Fedora")
        debian = chunk_under(chunks, "Install Guide", "Linux", "Debian")
        merged = merge_chunks([windows, fedora, debian, fedora])  # out of order, one twice
        assert merged.content.split("\n\n") == [windows.content, fedora.content, debian.content, fedora.content]
        assert len(merged.metadata[MERGED_FROM]) == 4 and merged.metadata["parent_id"] == URI

        sections = await index.resolve(merged)
        assert [s.heading for s in sections] == ["Debian", "Fedora", "Windows"]
        assert [s.chunk_ids for s in sections] == [(debian.id,), (fedora.id,), (windows.id,)]
        assert [a.heading for a in sections[1].ancestors] == ["Install Guide", "Linux"]


@pytest.mark.anyio
async def test_a_merged_chunk_over_two_documents_keeps_each_parent(workdir: Path) -> None:
    write(workdir, "docs/other.md", "# Other\n\nSomething else.\n")
    store = InMemoryStore()
    async with SectionIndex() as index:
        await pipeline(store, index).run(["docs"])
        (other,) = await store.get(filter=field("source_uri") == "docs/other.md")
        faq = chunk_under(await store.get(filter=field("source_uri") == URI), "FAQ")
        merged = merge_chunks([other, faq])
        assert "parent_id" not in merged.metadata  # two parents
        sections = await index.resolve(merged)
        assert [(s.parent_id, s.heading) for s in sections] == [("docs/other.md", "Other"), (URI, "FAQ")]


# ------------------------------------------------------------------------------ missing and stale


@pytest.mark.anyio
async def test_a_missing_parent_raises_naming_it_unless_skipped(workdir: Path) -> None:
    async with SectionIndex() as index:
        chunks = await ingest(InMemoryStore(), index)
        orphan = Document(id="gone.md#0", content="Lost text.", metadata={"parent_id": "gone.md", "headings": []})
        with pytest.raises(SectionNotFoundError, match="gone.md") as caught:
            await index.resolve(orphan)
        assert caught.value.parent_id == "gone.md" and caught.value.chunk_id == "gone.md#0"
        assert isinstance(caught.value, LookupError)
        assert await index.resolve(orphan, missing="skip") == []

        faq = chunk_under(chunks, "FAQ")
        merged = merge_chunks([orphan, faq])
        with pytest.raises(SectionNotFoundError):
            await index.resolve(merged)
        assert [s.heading for s in await index.resolve(merged, missing="skip")] == ["FAQ"]


@pytest.mark.anyio
async def test_bad_arguments_are_refused(workdir: Path) -> None:
    async with SectionIndex() as index:
        chunks = await ingest(InMemoryStore(), index)
        with pytest.raises(InvalidParameterError, match="missing"):
            await index.resolve(chunks[0], missing="ignore")  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="ancestors"):
            await index.resolve(chunks[0], ancestors="yes")  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="parent_id"):
            await index.resolve(Document(id="x", content="no provenance"))
        with pytest.raises(InvalidParameterError, match=MERGED_FROM):
            await index.resolve(Document(id="m", content="", metadata={MERGED_FROM: "a.md#0"}))
        with pytest.raises(InvalidParameterError):
            await index.resolve("docs/guide.md#0")  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError):
            merge_chunks([])
        with pytest.raises(InvalidParameterError):
            await index.add("# Not parsed")  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError):
            await index.delete()


@pytest.mark.anyio
async def test_re_adding_a_changed_document_replaces_its_sections(workdir: Path) -> None:
    store = InMemoryStore()
    async with SectionIndex() as index:
        old_chunks = await ingest(store, index)
        old_debian = chunk_under(old_chunks, "Install Guide", "Linux", "Debian")
        changed = GUIDE.replace("### Fedora\n\nRun dnf install fastrag.\n\n", "").replace(
            "Run apt-get install fastrag.", "Run apt install fastrag, then restart."
        )
        write(workdir, URI, changed)
        new_chunks = await ingest(store, index)

        parent = await index.get(URI)
        assert parent is not None
        assert ("Install Guide", "Linux", "Fedora") not in [s.heading_path for s in parent.sections]
        (debian,) = await index.resolve(chunk_under(new_chunks, "Install Guide", "Linux", "Debian"))
        assert debian.text == "Run apt install fastrag, then restart."
        # a hit from the old version (a stale cache, another store) is not silently mapped to the new text
        with pytest.raises(SectionNotFoundError, match="another version"):
            await index.resolve(old_debian)
        assert await index.resolve(old_debian, missing="skip") == []
        assert await index.parent_ids() == [URI]


@pytest.mark.anyio
async def test_prune_forgets_deleted_files(workdir: Path) -> None:
    write(workdir, "docs/other.md", "# Other\n\nSomething else.\n")
    store = InMemoryStore()
    async with SectionIndex() as index:
        await pipeline(store, index).run(["docs"])
        assert await index.parent_ids() == [URI, "docs/other.md"]
        (workdir / "docs/other.md").unlink()
        await pipeline(store, index).run(["docs"], prune=True)
        assert await index.parent_ids() == [URI]


@pytest.mark.anyio
async def test_an_index_attached_later_is_filled_from_unchanged_files(workdir: Path) -> None:
    store = InMemoryStore()
    await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False).run(["docs"])
    async with SectionIndex() as index:
        report = await pipeline(store, index).run(["docs"])
        assert report.files_unchanged == 1 and report.chunks_written == 0
        faq = chunk_under(await store.get(), "FAQ")
        assert [s.text for s in await index.resolve(faq)] == ["Ask on the forum."]


@pytest.mark.anyio
async def test_beir_documents_resolve_by_their_own_id(workdir: Path) -> None:
    lines = ['{"_id": "d1", "title": "Cats", "text": "Cats purr."}', '{"_id": "d2", "text": "Dogs bark."}']
    write(workdir, "beir/corpus.jsonl", "\n".join(lines) + "\n")
    store = InMemoryStore()
    async with SectionIndex() as index:
        await pipeline(store, index).run(["beir"])
        assert await index.parent_ids() == ["d1", "d2"]
        for chunk in await store.get():
            (section,) = await index.resolve(chunk)
            assert section.parent_id == chunk.metadata["parent_id"]
            assert section.source_uri == f"beir/corpus.jsonl#{section.parent_id}"
            assert section.heading_path == () and section.text == chunk.content


# ------------------------------------------------------------------------------ without the pipeline


@pytest.mark.anyio
async def test_add_file_names_and_hashes_like_the_pipeline(workdir: Path) -> None:
    store = InMemoryStore()
    await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False).run(["docs"])
    chunks = await store.get()
    async with SectionIndex() as index:
        (added,) = await index.add_file(workdir / URI)
        assert added.id == URI and added.content_hash == chunks[0].metadata["content_hash"]
        for chunk in chunks:
            (section,) = await index.resolve(chunk)
            assert section.text == BODIES[tuple(chunk.metadata["headings"])]


@pytest.mark.anyio
async def test_a_chunk_without_offsets_is_matched_by_headings_and_text() -> None:
    text = "# A\n\n## Example\n\nFirst example.\n\n## Example\n\nSecond example.\n\n## Example\n\nSecond example.\n"
    async with SectionIndex() as index:
        await index.add(parse_markdown(text, source_uri="a.md", default_title="a"))
        provenance = {"parent_id": "a.md", "headings": ["A", "Example"]}  # what older pipelines recorded
        legacy = Document(id="a.md#0", content="First example.", metadata=provenance)
        (section,) = await index.resolve(legacy)
        assert section.text == "First example." and section.position == 1
        # two sections under the same headings hold this text: refuse to guess
        twin = Document(id="a.md#1", content="Second example.", metadata=provenance)
        with pytest.raises(SectionNotFoundError, match="2 sections"):
            await index.resolve(twin)
        # with the pipeline's offsets the same text resolves exactly
        exact = twin.with_metadata(**{SECTION_INDEX: 2, SECTION_START: 0, SECTION_END: len("Second example.")})
        (third,) = await index.resolve(exact)
        assert third.parsed_index == 2 and third.position == 3
        # offsets that do not hold the chunk's text mean another version of the document
        wrong = exact.with_metadata(**{SECTION_INDEX: 0})
        with pytest.raises(SectionNotFoundError):
            await index.resolve(wrong)


# ---------------------------------------------------------------------------------------- storage


@pytest.mark.anyio
async def test_sections_survive_reopening(workdir: Path) -> None:
    path = workdir / "state" / "sections.db"
    store = InMemoryStore()
    async with SectionIndex(path) as index:
        chunks = await ingest(store, index)
    async with SectionIndex(path) as reopened:
        assert await reopened.parent_ids() == [URI]
        (debian,) = await reopened.resolve(chunk_under(chunks, "Install Guide", "Linux", "Debian"))
        assert debian.text == BODIES[debian.heading_path]
        assert [a.heading for a in debian.ancestors] == ["Install Guide", "Linux"]
        assert await reopened.delete(source_uris=[URI]) == 1
    async with SectionIndex(path) as again:
        assert await again.get(URI) is None


@pytest.mark.anyio
async def test_a_closed_index_refuses_calls_and_closing_twice_is_fine(tmp_path: Path) -> None:
    index = SectionIndex(tmp_path / "s.db")
    await index.aclose()
    await index.aclose()
    with pytest.raises(BackendUnavailableError):
        await index.parent_ids()


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"this is not a database" * 100)
    with pytest.raises(BackendUnavailableError):
        SectionIndex(bogus)


def test_source_section_is_frozen() -> None:
    section = SourceSection(id="a#section-0", parent_id="a", source_uri="a", title="", heading_path=(),
                            position=0, text="x", start=0, end=1)
    with pytest.raises(AttributeError):
        section.text = "y"  # type: ignore[misc]
