"""Load a dataset in the BEIR layout (Thakur et al., NeurIPS 2021 Datasets and Benchmarks).

A BEIR dataset is a folder::

    <name>/
      corpus.jsonl        one JSON object a line: {"_id": str, "title": str, "text": str, ...}
      queries.jsonl       one JSON object a line: {"_id": str, "text": str, ...}
      qrels/<split>.tsv   tab-separated, header "query-id  corpus-id  score", one judgement a line

The loader follows the reference implementation (``beir.datasets.data_loader.GenericDataLoader``): the
queries kept are exactly those judged in the split, and the qrels are kept as written (graded, and a
score ``<= 0`` means judged non-relevant). It is stricter about malformed input: every problem raises
:class:`~fastrag.errors.IngestionError` naming the file and the 1-based line number.

Reading is synchronous local file I/O (SciFact, 5,183 documents, loads in well under a second); from async
code call it through ``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastrag.errors import IngestionError
from fastrag.models import SOURCE_URI, TITLE, Document

__all__ = ["BeirDataset", "iter_corpus", "load_beir"]

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_DIR = "qrels"
QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True, slots=True)
class BeirDataset:
    """One split of a BEIR dataset, in memory.

    Attributes:
        corpus: ``{doc_id: Document}``, every document of ``corpus.jsonl`` in file order. Each document's
            ``content`` is the BEIR ``text``; its metadata holds ``source_uri`` (``"beir://<name>/<doc_id>"``)
            and ``title`` when the BEIR title is non-empty.
        queries: ``{query_id: query_text}`` for exactly the queries that have at least one judgement in the
            split's qrels (BEIR convention), in ``queries.jsonl`` order.
        qrels: ``{query_id: {doc_id: relevance}}``, graded integer relevance as written in the file; a value
            ``<= 0`` is a judged non-relevant document. A judged ``doc_id`` need not be in ``corpus``
            (some published BEIR datasets judge documents their corpus lacks); such a document can never be
            retrieved, so it only lowers recall and nDCG, as it does in BEIR.
        name: the dataset's folder name (``"scifact"``), as used in ``source_uri``.
    """

    corpus: dict[str, Document]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    name: str


def load_beir(path: str | os.PathLike[str], *, split: str = "test") -> BeirDataset:
    """Load the corpus, the judged queries and the qrels of one split of a BEIR dataset folder.

    Args:
        path: the dataset folder holding ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/``. Its final
            name (after resolving ``.`` and symlinks) becomes the dataset name in ``source_uri``.
        split: which ``qrels/<split>.tsv`` to read (``"test"``, ``"dev"``, ``"train"``).

    Returns:
        The :class:`BeirDataset`.

    Raises:
        IngestionError: a file is missing or unreadable (the message names it, and for a missing split
            lists the splits present); a line is not valid UTF-8 or JSON, or lacks a string ``_id`` or
            ``text`` (the message names file and line number); a document or query id repeats; a qrels line
            does not have three tab-separated fields with an integer score; a (query, document) pair is
            judged twice with different scores; a judged query is absent from ``queries.jsonl``.
    """
    root = Path(path)
    if not root.is_dir():
        raise IngestionError(f"BEIR dataset folder not found: {root}")
    name = root.resolve().name
    qrels_path = root / QRELS_DIR / f"{split}.tsv"
    if not qrels_path.is_file():
        available = sorted(p.stem for p in (root / QRELS_DIR).glob("*.tsv")) if (root / QRELS_DIR).is_dir() else []
        raise IngestionError(
            f"BEIR qrels file not found: {qrels_path} (splits present: {', '.join(available) or 'none'})"
        )

    corpus: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    for line_no, record, corpus_path in _iter_jsonl_records(root / CORPUS_FILE):
        doc = _document_from_record(record, corpus_path=corpus_path, line_no=line_no, dataset_name=name)
        if doc.id in corpus:
            raise IngestionError(
                f"{corpus_path}:{line_no}: duplicate _id {doc.id!r} (first seen on line {first_line[doc.id]})"
            )
        corpus[doc.id] = doc
        first_line[doc.id] = line_no

    qrels = _read_qrels(qrels_path)

    all_queries: dict[str, str] = {}
    query_lines: dict[str, int] = {}
    for line_no, record, queries_path in _iter_jsonl_records(root / QUERIES_FILE):
        query_id = _string_id(record, file=queries_path, line_no=line_no)
        text = _string_field(record, "text", file=queries_path, line_no=line_no)
        if query_id in all_queries:
            raise IngestionError(
                f"{queries_path}:{line_no}: duplicate _id {query_id!r} "
                f"(first seen on line {query_lines[query_id]})"
            )
        all_queries[query_id] = text
        query_lines[query_id] = line_no

    missing = [query_id for query_id in qrels if query_id not in all_queries]
    if missing:
        shown = ", ".join(repr(q) for q in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise IngestionError(
            f"{qrels_path}: {len(missing)} judged quer{'y is' if len(missing) == 1 else 'ies are'} "
            f"missing from {root / QUERIES_FILE}: {shown}"
        )
    queries = {query_id: text for query_id, text in all_queries.items() if query_id in qrels}
    return BeirDataset(corpus=corpus, queries=queries, qrels=qrels, name=name)


def iter_corpus(path: str | os.PathLike[str]) -> Iterator[Document]:
    """Stream the documents of a BEIR ``corpus.jsonl``, one line at a time, in file order.

    Memory stays constant in the corpus size. Duplicate ids are not checked here (a store upserting them
    keeps the last); :func:`load_beir` rejects them.

    Args:
        path: the ``corpus.jsonl`` file, or a BEIR dataset folder containing one. The dataset name used in
            ``source_uri`` (``"beir://<name>/<doc_id>"``) is the name of the folder holding the file.

    Yields:
        One :class:`~fastrag.models.Document` a non-blank line: ``id`` is ``_id``, ``content`` is ``text``,
        metadata holds ``source_uri`` and, when non-empty, ``title``.

    Raises:
        IngestionError: the file is missing or unreadable, or a line is not valid UTF-8 JSON with a string
            ``_id`` and ``text`` (the message names the file and 1-based line number). Lines before the
            bad one have already been yielded.
    """
    corpus_path = Path(path)
    if corpus_path.is_dir():
        corpus_path = corpus_path / CORPUS_FILE
    name = corpus_path.resolve().parent.name
    for line_no, record, file in _iter_jsonl_records(corpus_path):
        yield _document_from_record(record, corpus_path=file, line_no=line_no, dataset_name=name)


def _document_from_record(record: dict[str, Any], *, corpus_path: Path, line_no: int, dataset_name: str) -> Document:
    doc_id = _string_id(record, file=corpus_path, line_no=line_no)
    text = _string_field(record, "text", file=corpus_path, line_no=line_no)
    title = record.get("title")
    if title is not None and not isinstance(title, str):
        raise IngestionError(f"{corpus_path}:{line_no}: 'title' must be a string, got {type(title).__name__}")
    metadata: dict[str, Any] = {SOURCE_URI: f"beir://{dataset_name}/{doc_id}"}
    if title:
        metadata[TITLE] = title
    return Document(id=doc_id, content=text, metadata=metadata)


def _iter_lines(file: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, decoded line without its line ending)`` for every line of ``file``.

    Decoding line by line lets a UTF-8 error name its line. A byte-order mark on line 1 is dropped.
    """
    try:
        handle = file.open("rb")
    except FileNotFoundError as exc:
        raise IngestionError(f"BEIR file not found: {file}") from exc
    except OSError as exc:
        raise IngestionError(f"cannot open {file}: {exc}") from exc
    with handle:
        line_no = 0
        while True:
            try:
                raw = handle.readline()
            except OSError as exc:
                raise IngestionError(f"{file}:{line_no + 1}: read failed: {exc}") from exc
            if not raw:
                return
            line_no += 1
            try:
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise IngestionError(f"{file}:{line_no}: not valid UTF-8: {exc}") from exc
            yield line_no, text.rstrip("\r\n")


def _iter_jsonl_records(file: Path) -> Iterator[tuple[int, dict[str, Any], Path]]:
    """Yield ``(1-based line number, JSON object, file)`` for each non-blank line of a JSON Lines file."""
    for line_no, text in _iter_lines(file):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise IngestionError(f"{file}:{line_no}: invalid JSON: {exc.msg} (column {exc.colno})") from exc
        if not isinstance(record, dict):
            raise IngestionError(f"{file}:{line_no}: expected a JSON object, got {type(record).__name__}")
        yield line_no, record, file


def _string_id(record: dict[str, Any], *, file: Path, line_no: int) -> str:
    value = record.get("_id")
    # Some exporters write numeric ids; qrels ids are always text, so compare as text.
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise IngestionError(f"{file}:{line_no}: '_id' must be a non-empty string, got {value!r}")
    return value


def _string_field(record: dict[str, Any], key: str, *, file: Path, line_no: int) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        got = "nothing" if key not in record else type(value).__name__
        raise IngestionError(f"{file}:{line_no}: {key!r} must be a string, got {got}")
    return value


def _read_qrels(file: Path) -> dict[str, dict[str, int]]:
    """Parse ``qrels/<split>.tsv``; the header line is skipped when present (BEIR always writes one)."""
    qrels: dict[str, dict[str, int]] = {}
    for line_no, line in _iter_lines(file):
        if not line.strip():
            continue
        fields = line.split("\t")
        if line_no == 1 and tuple(f.strip().lower() for f in fields) == QRELS_HEADER:
            continue
        if len(fields) != 3:
            raise IngestionError(
                f"{file}:{line_no}: expected 3 tab-separated fields (query-id, corpus-id, score), "
                f"got {len(fields)}: {line!r}"
            )
        query_id, doc_id, raw_score = (f.strip() for f in fields)
        if not query_id or not doc_id:
            raise IngestionError(f"{file}:{line_no}: empty query-id or corpus-id: {line!r}")
        try:
            score = int(raw_score)
        except ValueError as exc:
            raise IngestionError(f"{file}:{line_no}: score must be an integer, got {raw_score!r}") from exc
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged and judged[doc_id] != score:
            raise IngestionError(
                f"{file}:{line_no}: ({query_id!r}, {doc_id!r}) judged again with a different score "
                f"({score} after {judged[doc_id]})"
            )
        judged[doc_id] = score
    return qrels
