"""SectionIndex: hits traced back to the sections of the documents they were cut from.

Everything runs against the in-memory fakes and a SQLite file in tmp_path (no backend, no download). The
expected section bodies below are written out by hand from GUIDE, not computed by the code under test.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fastrag.errors import BackendError, BackendUnavailableError, InvalidParameterError, SectionNotFoundError
from fastrag.filters import field
from fastrag.ingestion import Chunker, IngestionPipeline, parse_markdown
from fastrag.models import Document
from fastrag.sections import (
    MERGED_FROM,
    SECTION_END,
    SECTION_INDEX,
    SECTION_START,
    SectionIndex,
    SourceSection,
    merge_chunks,
)
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


# ------------------------------------------------------------------------------------ malformed hits
# Hits come from stores, caches and user code: a malformed one is refused with InvalidParameterError naming
# the bad key, in both missing modes; it never resolves to a guessed section, and never raises a bare
# TypeError or a SQLite error.

SMALL = "# Guide\n\n## Install\n\nRun pip install fastrag.\n\n## Usage\n\nImport it.\n"
INSTALL = {"parent_id": "guide.md", "headings": ["Guide", "Install"]}


@pytest.fixture
async def small() -> SectionIndex:
    async with SectionIndex() as index:
        await index.add(parse_markdown(SMALL, source_uri="guide.md", default_title="guide"))
        yield index


def merged(*parts: dict) -> Document:
    return Document(id="m", content="c", metadata={MERGED_FROM: list(parts)})


def install_part(**extra) -> dict:
    return {"content": "Run pip install fastrag.", **INSTALL, **extra}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("parts", "bad"),
    [
        ([install_part(id=["a"])], 0),  # unhashable
        ([install_part(id={"a": 1})], 0),
        ([install_part(id="a"), install_part(id=1)], 1),  # an int beside a str: not sortable together
        ([install_part(id=None), install_part(id="a")], 0),
        ([install_part(id="")], 0),
    ],
)
@pytest.mark.parametrize("missing", ["raise", "skip"])
async def test_merged_part_ids_must_be_non_empty_strings(small: SectionIndex, parts, bad, missing) -> None:
    with pytest.raises(InvalidParameterError, match=rf"merged_from\[{bad}\]\.id"):
        await small.resolve(merged(*parts), missing=missing)
    with pytest.raises(InvalidParameterError, match=rf"merged_from\[{bad}\]\.id"):
        merge_chunks([merged(*parts)])


@pytest.mark.anyio
async def test_merged_parts_without_ids_are_named_after_the_merged_chunk(small: SectionIndex) -> None:
    (section,) = await small.resolve(merged(install_part()))
    assert section.heading == "Install" and section.chunk_ids == ("m[0]",)


@pytest.mark.anyio
@pytest.mark.parametrize("missing", ["raise", "skip"])
async def test_a_merged_part_with_nothing_to_locate_it_by_is_refused(small: SectionIndex, missing) -> None:
    # no content and no offsets: it used to resolve silently to the whole Install section
    with pytest.raises(InvalidParameterError, match=r"merged_from\[0\] has no content"):
        await small.resolve(merged(dict(INSTALL)), missing=missing)
    # content that is not text: it used to be ignored, and the part matched by its headings alone
    usage = {"parent_id": "guide.md", "headings": ["Guide", "Usage"], "content": 5}
    with pytest.raises(InvalidParameterError, match=r"merged_from\[0\]\.content must be a string"):
        await small.resolve(merged(usage), missing=missing)
    # a plain chunk with empty text and no offsets is refused the same way
    with pytest.raises(InvalidParameterError, match="empty content"):
        await small.resolve(Document(id="x", content="", metadata=INSTALL), missing=missing)
    # a part nested in a part would lose its own parts
    with pytest.raises(InvalidParameterError, match=r"merged_from\[0\] is itself a merged chunk"):
        await small.resolve(merged(install_part(merged_from=[install_part()])), missing=missing)


@pytest.mark.anyio
async def test_a_merged_part_without_content_resolves_by_its_offsets(small: SectionIndex) -> None:
    offsets = {SECTION_INDEX: 0, SECTION_START: 4, SECTION_END: 7}  # "pip" in "Run pip install fastrag."
    (section,) = await small.resolve(merged({"id": "p", **INSTALL, **offsets}))
    parent = await small.get("guide.md")
    assert parent is not None
    (span,) = section.chunk_spans
    assert parent.text[span[0] : span[1]] == "pip"


@pytest.mark.anyio
async def test_a_parent_id_of_the_wrong_type_is_reported_as_such(small: SectionIndex) -> None:
    with pytest.raises(InvalidParameterError, match="parent_id'] has the wrong type") as caught:
        await small.resolve(Document(id="x", content="Run", metadata={"parent_id": 5}))
    assert "no parent_id" not in str(caught.value)
    with pytest.raises(InvalidParameterError, match=r"merged_from\[0\]\.parent_id has the wrong type"):
        await small.resolve(merged(install_part(parent_id=["guide.md"])))
    with pytest.raises(InvalidParameterError, match="no parent_id"):
        await small.resolve(Document(id="x", content="Run"))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        ({SECTION_INDEX: 0, SECTION_START: -5, SECTION_END: -2}, SECTION_START),
        ({SECTION_INDEX: 0, SECTION_START: 0.0, SECTION_END: 3.0}, SECTION_START),
        ({SECTION_INDEX: "0", SECTION_START: 0, SECTION_END: 3}, SECTION_INDEX),
        ({SECTION_INDEX: True}, SECTION_INDEX),
        ({SECTION_INDEX: -1}, SECTION_INDEX),
        ({SECTION_INDEX: 0, SECTION_START: 3, SECTION_END: 0}, SECTION_START),
        ({SECTION_INDEX: 0, SECTION_START: 0}, SECTION_START),  # half a span
        ({SECTION_START: 0, SECTION_END: 3}, SECTION_START),  # a span in no section
        ({"headings": "Guide"}, "headings"),
        ({"headings": [1, 2]}, "headings"),
        ({"headings": {"a": 1}}, "headings"),
        ({"content_hash": 5}, "content_hash"),
    ],
)
@pytest.mark.parametrize("missing", ["raise", "skip"])
async def test_malformed_provenance_keys_are_refused_naming_the_key(
    small: SectionIndex, metadata, key, missing
) -> None:
    hit = Document(id="x", content="Run", metadata={**INSTALL, **metadata})
    with pytest.raises(InvalidParameterError, match=rf"metadata\['{key}'\]"):
        await small.resolve(hit, missing=missing)
    with pytest.raises(InvalidParameterError, match=rf"merged_from\[0\]\.{key}"):
        await small.resolve(merged(install_part(**metadata)), missing=missing)


@pytest.mark.anyio
async def test_offsets_past_the_end_of_the_section_mean_another_version(small: SectionIndex) -> None:
    hit = Document(id="x", content="Run", metadata={**INSTALL, SECTION_INDEX: 0, SECTION_START: 0, SECTION_END: 10**9})
    with pytest.raises(SectionNotFoundError, match="past the end"):
        await small.resolve(hit)
    assert await small.resolve(hit, missing="skip") == []
    # None means "not recorded", as stores with a fixed schema return it: matched by headings and text
    unrecorded = Document(id="y", content="Run", metadata={**INSTALL, SECTION_INDEX: None, "content_hash": None})
    (section,) = await small.resolve(unrecorded)
    assert section.heading == "Install"


# ------------------------------------------------------------------------------ other public methods


@pytest.mark.anyio
async def test_get_and_delete_refuse_ids_of_the_wrong_type(small: SectionIndex) -> None:
    for bad in (["guide.md"], None, 5, ""):
        with pytest.raises(InvalidParameterError, match="parent_id must be a non-empty string"):
            await small.get(bad)  # type: ignore[arg-type]
    for kwargs, match in [
        ({"parent_ids": [{"a": 1}]}, r"parent_ids\[0\]"),
        ({"parent_ids": ["guide.md", 1]}, r"parent_ids\[1\]"),
        ({"parent_ids": [None]}, r"parent_ids\[0\]"),
        ({"parent_ids": "guide.md"}, "wrap a single one in a list"),
        ({"source_uris": b"guide.md"}, "wrap a single one in a list"),
        ({"source_uris": 5}, "source_uris must be a collection"),
        ({"source_uris": {"guide.md": 1}}, "source_uris must be a collection"),
    ]:
        with pytest.raises(InvalidParameterError, match=match):
            await small.delete(**kwargs)
    assert await small.parent_ids() == ["guide.md"]  # nothing was deleted on the way
    assert await small.delete(parent_ids=(pid for pid in ["guide.md", "other.md"])) == 1


@pytest.mark.anyio
async def test_add_text_names_an_unknown_kind_and_accepts_a_kind_by_its_value() -> None:
    async with SectionIndex() as index:
        with pytest.raises(InvalidParameterError, match="unknown kind 'exe'") as caught:
            await index.add_text("# A\n\nb\n", source_uri="a.md", kind="exe")  # type: ignore[arg-type]
        assert "markdown" in str(caught.value) and "beir-corpus" in str(caught.value)
        assert "JSON" not in str(caught.value)
        with pytest.raises(InvalidParameterError, match="unknown kind"):
            await index.add_text("# A\n\nb\n", source_uri="a.md", kind=3)  # type: ignore[arg-type]
        # a .txt file parsed as Markdown by the kind's value: the heading is a heading
        (added,) = await index.add_text("# A\n\nb\n", source_uri="notes.txt", kind="markdown")  # type: ignore[arg-type]
        assert [s.heading_path for s in added.sections] == [("A",)]
        assert await index.parent_ids() == ["notes.txt"]


@pytest.mark.anyio
async def test_writes_refuse_arguments_of_the_wrong_type(tmp_path: Path) -> None:
    from fastrag.ingestion.parsers import ParsedDocument, Section

    doc = parse_markdown("# A\n\nb\n", source_uri="a.md", default_title="a")
    write(tmp_path, "a.md", "# A\n\nb\n")
    async with SectionIndex() as index:
        with pytest.raises(InvalidParameterError, match="source_uri '\\\\ud800.md' is not valid Unicode"):
            await index.add_text("# A\n", source_uri="\ud800.md")
        with pytest.raises(InvalidParameterError, match="source_uri must be a non-empty string"):
            await index.add_text("# A\n", source_uri=None)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="use add"):
            await index.add_all(doc)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="add_all takes a list"):
            await index.add_all(None)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="content_hash"):
            await index.add(doc, content_hash="")
        bad_docs = [
            (ParsedDocument(source_uri=5, title="t", sections=()), r"documents\[1\]\.id"),  # type: ignore[arg-type]
            (ParsedDocument(source_uri="b.md", title=None, sections=()),  # type: ignore[arg-type]
             r"documents\[1\]\.title"),
            (ParsedDocument(source_uri="b.md", title="t", sections=(Section(("A",), b"x"),)),  # type: ignore[arg-type]
             r"documents\[1\]\.sections\[0\]\.text"),
            (ParsedDocument(source_uri="b.md", title="t", sections=(Section("A", "x"),)),  # type: ignore[arg-type]
             r"documents\[1\]\.sections\[0\]\.heading_path"),
            (ParsedDocument(source_uri="b.md", title="\udc80", sections=()), r"documents\[1\]\.title is not valid"),
        ]
        for bad, match in bad_docs:
            with pytest.raises(InvalidParameterError, match=match):
                await index.add_all([doc, bad])
        with pytest.raises(InvalidParameterError, match="path must be"):
            await index.add_file(5)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="source_uri must be a non-empty string"):
            await index.add_file(tmp_path / "a.md", source_uri="")  # used to fall back to the default name
        assert await index.parent_ids() == []  # nothing was written by any of these


@pytest.mark.parametrize("bad", [None, 5, "", b"x.db", "a\x00b.db"])
def test_a_path_that_is_not_a_file_name_is_refused(bad, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidParameterError, match="path must be"):
        SectionIndex(bad)
    assert list(tmp_path.iterdir()) == []  # no file named "None" or "5"


def test_merge_chunks_refuses_an_empty_id_and_a_non_string_separator() -> None:
    chunk = Document(id="a#0", content="A.", metadata={"parent_id": "a"})
    with pytest.raises(InvalidParameterError, match="id must be a non-empty string"):
        merge_chunks([chunk], id="")
    with pytest.raises(InvalidParameterError, match="separator"):
        merge_chunks([chunk, chunk], separator=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        merge_chunks("a#0")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_tree_walks_refuse_a_section_of_another_document(small: SectionIndex) -> None:
    await small.add(parse_markdown("# Other\n\n## Deep\n\nx\n", source_uri="other.md", default_title="o"))
    guide, other = await small.get("guide.md"), await small.get("other.md")
    assert guide is not None and other is not None
    deep = other.sections[-1]
    assert [a.heading for a in other.ancestors(deep)] == ["Other"]
    with pytest.raises(SectionNotFoundError, match="other.md#section-1"):
        guide.ancestors(deep)
    with pytest.raises(SectionNotFoundError):
        guide.children(replace(deep, id="nope"))
    with pytest.raises(InvalidParameterError, match="SourceSection"):
        guide.children("guide.md#section-0")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_corrupt_stored_row_is_a_backend_error(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "s.db"
    async with SectionIndex(path) as index:
        await index.add(parse_markdown(SMALL, source_uri="guide.md", default_title="guide"))
    with sqlite3.connect(path) as conn:  # another program writes to the table
        conn.execute("UPDATE fastrag_sections SET sections = '{not json' WHERE parent_id = 'guide.md'")
    async with SectionIndex(path) as index:
        with pytest.raises(BackendError, match="corrupt"):
            await index.get("guide.md")
        with pytest.raises(BackendError, match="corrupt"):
            await index.resolve(Document(id="x", content="Run", metadata=INSTALL))


# ------------------------------------------------------------------------------ the old import paths


def test_the_old_import_paths_still_work_and_name_the_new_one() -> None:
    """``fastrag.sections`` is where the section index lives now (retrieval never imports ingestion); the
    names it had under ``fastrag.retrieval`` and ``fastrag.retrieval.sections`` are the same objects, each
    import warning with the new path."""
    import importlib
    import sys

    import fastrag.retrieval
    import fastrag.sections

    sys.modules.pop("fastrag.retrieval.sections", None)
    with pytest.warns(DeprecationWarning, match=r"import from fastrag\.sections"):
        old = importlib.import_module("fastrag.retrieval.sections")
    for name in fastrag.sections.__all__:
        assert getattr(old, name) is getattr(fastrag.sections, name)
    for name in ("SectionIndex", "SourceSection", "ParentDocument", "merge_chunks"):
        with pytest.warns(DeprecationWarning, match=rf"from fastrag\.sections import {name}"):
            assert getattr(fastrag.retrieval, name) is getattr(fastrag.sections, name)
