"""A damaged SQLite store file is a typed error naming the file, never a traceback or a silent empty store
(issue 13.7): every single-byte flip at the start of each page (b-tree headers, cell pointers) and across the
file header and schema page either still answers or raises :class:`~fastrag.errors.BackendError` naming the
file; a 0-byte file opened for reading is no index, not an empty one."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import numpy as np
import pytest

from fastrag.config import open_store
from fastrag.errors import BackendError, BackendUnavailableError
from fastrag.models import Document
from fastrag.vector_store.sqlite import SQLiteVectorStore

PAGE = 4096


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pristine") / "store.db"

    async def build() -> None:
        rng = np.random.default_rng(7)
        async with SQLiteVectorStore(path, dimension=8) as store:
            docs = [Document(id=f"d{i:03d}", content=f"solar power note {i} " * 20, metadata={"n": i}) for i in range(300)]
            await store.upsert(docs, embeddings=rng.random((300, 8), dtype=np.float32))

    anyio.run(build)
    return path


async def use(path: Path) -> None:
    async with SQLiteVectorStore(path) as store:
        await store.search_text("solar power", k=3)
        await store.search_vector(np.ones(8, dtype=np.float32), k=3)
        await store.count()
        await store.get(ids=["d001"])
        await store.get()


def test_every_byte_flip_answers_or_raises_a_typed_error_naming_the_file(pristine: Path, tmp_path: Path) -> None:
    size = pristine.stat().st_size
    positions = [*range(0, 100, 9), *range(100, PAGE, 331)]
    positions += [page * PAGE + offset for page in range(1, size // PAGE) for offset in (0, 3, 8)]
    damaged = tmp_path / "damaged.db"
    typed = 0
    for position in positions:
        shutil.copy(pristine, damaged)
        with damaged.open("r+b") as handle:
            handle.seek(position)
            byte = handle.read(1)[0]
            handle.seek(position)
            handle.write(bytes([byte ^ 0xFF]))
        try:
            anyio.run(use, damaged)
        except BackendError as exc:  # anything else (KeyError, IndexError, UnicodeDecodeError, ...) fails the test
            assert str(damaged) in str(exc), (position, exc)
            typed += 1
    assert typed >= 20  # the flips did damage the file


def test_a_damaged_file_names_the_damage_and_what_to_do(pristine: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "header.db"
    shutil.copy(pristine, damaged)
    with damaged.open("r+b") as handle:
        handle.write(b"not a database!!")
    with pytest.raises(BackendUnavailableError, match="not a database") as info:
        anyio.run(use, damaged)
    assert info.value.store == str(damaged)


@pytest.mark.anyio
async def test_a_zero_byte_file_opened_for_reading_is_no_index(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(BackendUnavailableError, match=r"empty \(0 bytes\)") as info:
        open_store(f"sqlite:///{empty}", create=False)
    assert str(empty) in str(info.value)
    async with open_store(f"sqlite:///{empty}") as store:  # indexing into it (create=True) makes it a store
        assert await store.count() == 0
