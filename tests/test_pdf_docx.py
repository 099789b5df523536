"""PDF and Word ingestion (issue 18.4), on files these tests generate: PDFs drawn with reportlab (and
encrypted or outlined with pypdf's writer), Word files written with python-docx (and encrypted with
msoffcrypto-tool). Indexing goes into the real SQLite store; the CLI test runs `fastrag index` and
`fastrag search` on a PDF."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

pytest.importorskip("pypdf", reason="the pdf extra is not installed")
pytest.importorskip("docx", reason="the docx extra is not installed")
reportlab = pytest.importorskip("reportlab", reason="reportlab (test extra) generates the test PDFs")

from click.testing import CliRunner  # noqa: E402
from pypdf import PdfReader, PdfWriter  # noqa: E402

from fastrag.cli import main  # noqa: E402
from fastrag.errors import IngestionError, InvalidParameterError, NoTextError  # noqa: E402
from fastrag.ingestion import IngestionPipeline, parse  # noqa: E402
from fastrag.models import PAGE, Document  # noqa: E402
from fastrag.querying import build_prompt  # noqa: E402
from fastrag.querying.engine import Citation  # noqa: E402
from fastrag.testing.fakes import HashingEmbedder  # noqa: E402
from fastrag.vector_store.sqlite import SQLiteVectorStore  # noqa: E402

PAGES = [
    ("Installation", "Mount the photovoltaic panels facing south on a sturdy roof rack."),
    ("Wiring", "Connect the inverter to the battery bank with copper cables."),
    ("Maintenance", "Clean the zeppelin-shaped brackets twice a year with soapy water."),
]


def make_pdf(*, pages: list[tuple[str, str]] = PAGES, table: bool = True, image_page: bool = False,
             title: str = "Solar Guide") -> bytes:
    """A PDF with one heading and a paragraph per page, a table on page 2, optionally a last page that is
    only an image (no text layer)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Image, PageBreak, Paragraph, SimpleDocTemplate, Table

    styles = getSampleStyleSheet()
    out = io.BytesIO()
    story: list = []
    for number, (heading, body) in enumerate(pages, start=1):
        if number > 1:
            story.append(PageBreak())
        story += [Paragraph(heading, styles["Heading1"]), Paragraph(body, styles["BodyText"])]
        if table and number == 2:
            story.append(Table([["Part", "Count"], ["inverter", "1"], ["battery", "4"]]))
    if image_page:
        from PIL import Image as PILImage

        picture = io.BytesIO()
        PILImage.new("RGB", (120, 60), "gray").save(picture, "PNG")
        picture.seek(0)
        story += [PageBreak(), Image(picture, width=240, height=120)]
    SimpleDocTemplate(out, pagesize=A4, title=title).build(story)
    return out.getvalue()


def with_outline(data: bytes, entries: list[tuple[str, int, str | None]]) -> bytes:
    """``data`` with outline entries ``(title, 0-based page, parent title or None)`` added by pypdf's writer."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    added = {}
    for name, page, parent in entries:
        added[name] = writer.add_outline_item(title=name, page_number=page, parent=added.get(parent) if parent else None)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def encrypted_pdf(data: bytes, *, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph("Solar Handbook", style="Title")
    document.add_paragraph("Read this before you start.")
    document.add_heading("Installation", 1)
    document.add_paragraph("Mount the photovoltaic panels facing south.")
    document.add_heading("Wiring", 2)
    document.add_paragraph("Connect the inverter with copper cables.")
    table = document.add_table(rows=2, cols=2)
    for (row, col), text in {(0, 0): "Part", (0, 1): "Count", (1, 0): "inverter", (1, 1): "1"}.items():
        table.cell(row, col).text = text
    document.add_heading("Maintenance", 1)
    document.add_paragraph("Clean the zeppelin-shaped brackets twice a year.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def encrypted_docx(data: bytes) -> bytes:
    office = pytest.importorskip("msoffcrypto.format.ooxml", reason="msoffcrypto-tool (test extra) encrypts the DOCX")
    out = io.BytesIO()
    office.OOXMLFile(io.BytesIO(data)).encrypt("secret", out)
    return out.getvalue()


# ------------------------------------------------------------------------------------------ parsing


def test_pdf_pages_become_sections_with_page_numbers_table_text_and_title() -> None:
    [doc] = parse(make_pdf(), source_uri="guide.pdf")
    assert doc.title == "Solar Guide"
    assert [s.page for s in doc.sections] == [1, 2, 3]
    assert "zeppelin-shaped" in doc.sections[2].text and "zeppelin" not in doc.sections[1].text
    table = doc.sections[1].text
    assert all(cell in table for cell in ("Part", "Count", "inverter", "battery"))
    assert all(s.heading_path == () for s in doc.sections)  # no outline, no headings


def test_pdf_outline_gives_each_page_its_heading_path() -> None:
    data = with_outline(make_pdf(), [("Setup", 0, None), ("Cabling", 1, "Setup"), ("Care", 2, None)])
    [doc] = parse(data, source_uri="guide.pdf")
    assert [s.heading_path for s in doc.sections] == [("Setup",), ("Setup", "Cabling"), ("Care",)]


def test_pdf_with_only_an_owner_password_is_read_and_one_needing_a_password_is_refused() -> None:
    [doc] = parse(encrypted_pdf(make_pdf(), user_password=""), source_uri="open.pdf")
    assert len(doc.sections) == 3
    with pytest.raises(NoTextError, match=r"locked\.pdf: encrypted PDF that needs a password"):
        parse(encrypted_pdf(make_pdf(), user_password="secret"), source_uri="locked.pdf")


def image_only_pdf() -> bytes:
    """A one-page PDF with a drawing and no text (what a scan looks like to a text extractor)."""
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    page = canvas.Canvas(out)
    page.rect(100, 100, 200, 200, fill=1)  # drawn, but no text
    page.showPage()
    page.save()
    return out.getvalue()


def test_pdf_without_text_layer_truncated_or_not_a_pdf_is_refused_with_the_reason() -> None:
    with pytest.raises(NoTextError, match=r"scan\.pdf: no text layer .*OCR"):
        parse(image_only_pdf(), source_uri="scan.pdf")
    data = make_pdf()
    with pytest.raises(IngestionError, match=r"cut\.pdf: truncated or malformed"):
        parse(data[: len(data) * 6 // 10], source_uri="cut.pdf")
    with pytest.raises(IngestionError, match=r"fake\.pdf: not a PDF"):
        parse(b"hello, I am text", source_uri="fake.pdf")


def test_docx_headings_become_sections_and_tables_rows() -> None:
    [doc] = parse(make_docx(), source_uri="handbook.docx")
    assert doc.title == "Solar Handbook"
    assert [(s.heading_path, s.text) for s in doc.sections] == [
        ((), "Read this before you start."),
        (("Installation",), "Mount the photovoltaic panels facing south."),
        (("Installation", "Wiring"), "Connect the inverter with copper cables.\n\nPart | Count\ninverter | 1"),
        (("Maintenance",), "Clean the zeppelin-shaped brackets twice a year."),
    ]
    assert all(s.page is None for s in doc.sections)


def test_docx_encrypted_legacy_or_truncated_is_refused_with_the_reason() -> None:
    data = make_docx()
    with pytest.raises(NoTextError, match=r"locked\.docx: password-protected"):
        parse(encrypted_docx(data), source_uri="locked.docx")
    with pytest.raises(IngestionError, match=r"cut\.docx: truncated or malformed"):
        parse(data[: len(data) // 2], source_uri="cut.docx")


def test_missing_extra_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)
    monkeypatch.setitem(sys.modules, "docx", None)
    with pytest.raises(IngestionError, match=r'a\.pdf: .*pip install "fastrag-retrieval\[pdf\]"'):
        parse(b"%PDF-1.4\n%%EOF", source_uri="a.pdf")
    with pytest.raises(IngestionError, match=r'a\.docx: .*pip install "fastrag-retrieval\[docx\]"'):
        parse(b"PK", source_uri="a.docx")


# ----------------------------------------------------------------------------------------- pipeline


@pytest.fixture
def mixed_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.pdf").write_bytes(make_pdf(image_page=True))
    (folder / "handbook.docx").write_bytes(make_docx())
    (folder / "locked.pdf").write_bytes(encrypted_pdf(make_pdf(), user_password="secret"))
    (folder / "locked.docx").write_bytes(encrypted_docx(make_docx()))
    full = make_pdf()
    (folder / "cut.pdf").write_bytes(full[: len(full) // 2])
    (folder / "scan.pdf").write_bytes(image_only_pdf())
    (folder / "notes.md").write_text("# Notes\n\nThe zeppelin hangar is closed on Sundays.\n")
    return folder


@pytest.mark.anyio
async def test_pipeline_indexes_pdf_pages_and_docx_sections_and_skips_bad_files_with_reasons(
    mixed_folder: Path, tmp_path: Path
) -> None:
    async with SQLiteVectorStore(tmp_path / "index.db") as store:
        pipeline = IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False)
        report = await pipeline.run([mixed_folder])
        assert report.files_indexed == 3  # guide.pdf, handbook.docx, notes.md
        # sound files without readable text are skipped with the reason; a damaged one failed
        skipped = {Path(s.path).name: s.reason for s in report.skipped_files}
        assert skipped == {"locked.pdf": "encrypted PDF that needs a password",
                           "locked.docx": "password-protected Word document",
                           "scan.pdf": skipped["scan.pdf"]}
        assert skipped["scan.pdf"].startswith("no text layer") and "OCR" in skipped["scan.pdf"]
        failed = {Path(f.path).name: f.message for f in report.errors}
        assert set(failed) == {"cut.pdf"} and "truncated" in failed["cut.pdf"]
        assert len(report.warnings) == 1 and "guide.pdf: page(s) 4 have no text layer" in report.warnings[0]
        chunks = [d for d in await store.get() if str(d.metadata["source_uri"]).endswith("/docs/guide.pdf")]
        assert sorted(d.metadata[PAGE] for d in chunks) == [1, 2, 3]
        hits = await store.search_text("zeppelin brackets", k=5)
        pdf_hit = next(d for d in hits if str(d.metadata["source_uri"]).endswith("guide.pdf"))
        assert pdf_hit.metadata[PAGE] == 3 and pdf_hit.source_label.endswith("guide.pdf p. 3")
        docx_hit = next(d for d in hits if str(d.metadata["source_uri"]).endswith("handbook.docx"))
        assert docx_hit.metadata["headings"] == ["Maintenance"] and PAGE not in docx_hit.metadata


@pytest.mark.anyio
async def test_pipeline_size_and_time_limits_skip_the_file_and_go_on(tmp_path: Path) -> None:
    (tmp_path / "big.pdf").write_bytes(make_pdf())
    (tmp_path / "small.md").write_text("# Small\n\nA tiny note.\n")
    async with SQLiteVectorStore(tmp_path / "index.db") as store:
        small = IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False,
                                  max_file_bytes=1000)
        report = await small.run([tmp_path])
        assert report.files_indexed == 1 and report.ok  # too large is skipped with the reason, as for every format
        (skipped,) = [s for s in report.skipped_files if s.path.endswith("big.pdf")]
        assert "larger than the size limit" in skipped.reason
        # a parser that runs past the limit is stopped (its worker process is killed) and the run goes on
        hasty = IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False,
                                  parse_timeout=0.001)
        (tmp_path / "small.md").write_text("# Small\n\nA changed note.\n")
        report = await hasty.run([tmp_path])
        assert report.files_indexed == 1
        assert "big.pdf: parsing took longer than 0.001 s (parse_timeout)" in report.errors[0].message
        # the next run, with room, reads it: the killed worker left nothing behind
        report = await IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, show_progress=False).run(
            [tmp_path]
        )
        assert report.ok and report.files_indexed == 1 and report.files_unchanged == 1
    for bad in ({"max_file_bytes": 0}, {"parse_timeout": 0}, {"parse_timeout": float("nan")}):
        with pytest.raises(InvalidParameterError):
            IngestionPipeline(embedder=HashingEmbedder(), vector_store=store, **bad)


def test_citations_name_the_page() -> None:
    doc = Document(id="guide.pdf#4", content="Clean the brackets.", metadata={"source_uri": "guide.pdf", PAGE: 3})
    prompt = build_prompt("How to clean?", [doc])
    assert "source_uri: guide.pdf\npage: 3\n" in prompt.messages[1].content
    assert Citation(number=1, document=doc).label == "guide.pdf p. 3"
    assert Document(id="a#0", content="x", metadata={"source_uri": "a.md"}).source_label == "a.md"


def test_cli_search_on_an_indexed_pdf_prints_file_and_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "guide.pdf").write_bytes(make_pdf())
    (tmp_path / "locked.pdf").write_bytes(encrypted_pdf(make_pdf(), user_password="secret"))
    monkeypatch.chdir(tmp_path)
    env = {"FASTRAG_STORE": None, "FASTRAG_MODE": None, "FASTRAG_CONFIG": None, "FASTRAG_LEXICAL_STORE": None}
    runner = CliRunner()
    full = make_pdf()
    (tmp_path / "cut.pdf").write_bytes(full[: len(full) // 2])
    indexed = runner.invoke(main, ["index", "guide.pdf", "locked.pdf"], env=env, catch_exceptions=False)
    assert indexed.exit_code == 0, indexed.stderr  # an encrypted file is skipped, named with the reason
    assert "indexed 1 files" in indexed.stdout and "1 skipped" in indexed.stdout
    assert "locked.pdf: encrypted PDF that needs a password" in indexed.stdout
    damaged = runner.invoke(main, ["index", "cut.pdf"], env=env, catch_exceptions=False)
    assert damaged.exit_code == 1 and "cut.pdf: truncated or malformed PDF" in damaged.stderr  # a damaged one failed
    found = runner.invoke(main, ["search", "zeppelin brackets", "--mode", "keyword"], env=env, catch_exceptions=False)
    assert found.exit_code == 0, found.stderr
    assert "guide.pdf p. 3" in found.stdout.splitlines()[0]


@pytest.mark.anyio
async def test_a_parser_process_that_dies_is_reported_and_the_next_file_still_parses() -> None:
    from fastrag.ingestion.parsers import FileKind
    from fastrag.ingestion.worker import ParserProcess

    async with ParserProcess(timeout=60) as parser:
        [doc], _ = await parser.parse(make_pdf(), source_uri="a.pdf", kind=FileKind.PDF, max_unpacked_bytes=None)
        assert len(doc.sections) == 3
        parser._process.kill()  # noqa: SLF001 - the child dies between two files (OOM killer, a native crash)
        await parser._process.wait()  # noqa: SLF001
        with pytest.raises(IngestionError, match=r"b\.pdf: the parser process died"):
            await parser.parse(make_pdf(), source_uri="b.pdf", kind=FileKind.PDF, max_unpacked_bytes=None)
        [doc], _ = await parser.parse(make_pdf(), source_uri="c.pdf", kind=FileKind.PDF, max_unpacked_bytes=None)
        assert doc.source_uri == "c.pdf"
