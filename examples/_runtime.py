"""Shared settings for the examples: everything comes from the environment, with embedded defaults.

=============================  =========================================  ======================================
variable                       meaning                                    default
=============================  =========================================  ======================================
``FASTRAG_STORE``              store URL                                  ``sqlite:///.fastrag/examples.db``
``FASTRAG_COLLECTION``         collection / index name (remote stores)    ``fastrag_examples``
``FASTRAG_EMBEDDING_MODEL``    Model2Vec model folder or name             the static model shipped in fastrag
``FASTRAG_QUESTION``           the question ``10_retrieving.py`` asks     a question about hybrid search
=============================  =========================================  ======================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ExampleConfig:
    store: str
    collection: str
    embedding_model: str | None
    question: str
    docs_dir: Path


def config_from_env() -> ExampleConfig:
    """Read the example settings from the environment (see the module docstring)."""
    return ExampleConfig(
        store=os.environ.get("FASTRAG_STORE", "sqlite:///.fastrag/examples.db"),
        collection=os.environ.get("FASTRAG_COLLECTION", "fastrag_examples"),
        embedding_model=os.environ.get("FASTRAG_EMBEDDING_MODEL") or None,
        question=os.environ.get("FASTRAG_QUESTION", "How does hybrid search combine BM25 and vector results?"),
        docs_dir=ROOT / "docs",
    )
