"""Trace retrieved chunks back to the sections of the documents they were cut from.

A chunk is what retrieval ranks; a *section* (a heading and the text under it, inside its enclosing
headings) is often what a reader or a language model needs. :class:`SectionIndex` keeps every parent
document in a normalised form, a tree of sections, and :meth:`SectionIndex.resolve` maps a hit back to the
section(s) it came from, with the enclosing sections and document-scoped provenance::

    from fastrag.sections import SectionIndex

    async with SectionIndex("index.sections.db") as sections:
        pipeline = IngestionPipeline(embedder=embedder, vector_store=store, section_index=sections)
        await pipeline.run(["docs/"])
        for hit in await retriever.retrieve("how do I install on Debian?", k=3):
            for section in await sections.resolve(hit):
                print(section.source_uri, " > ".join(section.heading_path), section.start, section.end)

**The normalised document.** The parser's sections (:class:`~fastrag.ingestion.parsers.ParsedDocument`,
the very ones the chunker cut) become a tree: each heading is one :class:`SourceSection` whose ``text`` is
its own body (not its subsections'), whose children are the headings nested under it, and whose
``depth`` is the length of its heading path. A heading with no body of its own (``# Guide`` directly
followed by ``## Install``) is kept as a section with empty ``text``, so every heading on a path exists.
Text before the first heading (or a file without headings) is a section with an empty heading path at
depth 0; it encloses nothing. The document's :attr:`ParentDocument.text` renders the tree as Markdown:
each heading as ``"#" * depth + " " + heading``, then its body, blocks separated by a blank line; a
section's ``start``/``end`` are the offsets of its body in that text, so
``document.text[section.start:section.end] == section.text``.

**Which section a chunk came from.** Chunks written by :class:`~fastrag.ingestion.IngestionPipeline`
carry ``parent_id``, ``headings``, ``content_hash`` and, since this module exists, :data:`~fastrag.models.SECTION_INDEX`,
:data:`~fastrag.models.SECTION_START` and :data:`~fastrag.models.SECTION_END` (which parsed section, and the chunk's character offsets in
its body). A chunk with those keys is resolved exactly and checked: its text must be that slice of the
section, or, for a heading with nothing under it (an empty body, offsets ``0, 0``), the heading itself (the
chunker makes such a heading its section's one chunk). A chunk without them (written before those keys
existed, or by other code) is matched by its
heading path and its text: the one section under those headings whose body contains the chunk's text.

**Merged chunks.** A hit whose ``metadata["merged_from"]`` (:data:`MERGED_FROM`) is a list of mappings,
one per original chunk (``{"id", "content", "parent_id", "headings", "section_index", ...}``, as
:func:`merge_chunks` builds them), resolves to the sections of all its parts, in document order, each
once.

**Malformed hits.** A hit whose provenance has the wrong shape (a ``parent_id`` that is not a string, a
merged part whose ``id`` is not a string or that has neither text nor offsets, offsets that are not ints)
raises :class:`~fastrag.errors.InvalidParameterError` naming the key, whatever ``missing`` says: it is a
bug in whatever produced the hit, not a gap in the index.

**The package.** :mod:`fastrag.sections.document` holds the normalised document (:class:`SourceSection`,
:class:`ParentDocument`), :mod:`fastrag.sections.provenance` how a chunk records where it came from
(:func:`merge_chunks`, locating a chunk in its section), and :mod:`fastrag.sections.index` the SQLite-backed
:class:`SectionIndex`. It sits beside retrieval, not inside it: it reads files with the ingestion parsers
(:meth:`SectionIndex.add_text`, :meth:`SectionIndex.add_file`), while ingestion only hands it documents through
the index it was given, so ingestion never imports it and retrieval never imports ingestion
(``tests/test_import_cycles.py``). Its names were importable from ``fastrag.retrieval.sections`` and
``fastrag.retrieval`` before; those paths still work and warn (``DeprecationWarning``).
"""

from fastrag.models import SECTION_END, SECTION_INDEX, SECTION_START
from fastrag.sections.document import ParentDocument, SourceSection
from fastrag.sections.index import SectionIndex
from fastrag.sections.provenance import MERGED_FROM, merge_chunks

__all__ = [
    "MERGED_FROM",
    "SECTION_END",
    "SECTION_INDEX",
    "SECTION_START",
    "ParentDocument",
    "SectionIndex",
    "SourceSection",
    "merge_chunks",
]
