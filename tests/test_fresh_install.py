"""The default install, for real: ``pip install .`` (no extra) into a fresh virtual environment gives a
``fastrag`` command that indexes and searches in hybrid mode with the shipped model (issue 16.5).

It builds a venv and installs from PyPI (about two minutes here), so it runs only when asked:
``FASTRAG_TEST_FRESH_VENV=1 pytest tests/test_fresh_install.py``. The same promise is checked on every run,
in-process, by ``tests/test_packaging.py::test_the_default_install_indexes_and_searches_in_hybrid_mode``
(every optional package blocked) and ``test_the_shipped_models_readers_are_core_dependencies``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FASTRAG_TEST_FRESH_VENV") != "1",
                       reason="builds a venv and installs from PyPI; set FASTRAG_TEST_FRESH_VENV=1 to run it"),
]


def test_pip_install_without_extras_indexes_and_searches_in_hybrid_mode(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT)], capture_output=True,
                         text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr
    listed = subprocess.run([str(venv / "bin" / "pip"), "list", "--format=json"], capture_output=True, text=True,
                            check=True)
    assert "model2vec" not in {p["name"].lower() for p in json.loads(listed.stdout)}
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "volcano.md").write_text("# Volcano\n\nVolcanoes erupt molten lava.\n", encoding="utf-8")
    (notes / "tea.md").write_text("# Tea\n\nGreen tea is steeped briefly.\n", encoding="utf-8")
    fastrag = str(venv / "bin" / "fastrag")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FASTRAG_", "PYTHON"))}
    index = subprocess.run([fastrag, "index", "notes"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert index.returncode == 0, index.stderr
    search = subprocess.run([fastrag, "search", "molten lava", "--json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert search.returncode == 0, search.stderr
    found = json.loads(search.stdout)
    assert found["mode"] == "hybrid"
    assert found["documents"][0]["metadata"]["source_uri"] == "notes/volcano.md"
