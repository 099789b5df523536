"""Shared settings for the examples: everything comes from the environment, with embedded defaults.

=============================  =========================================  ======================================
variable                       meaning                                    default
=============================  =========================================  ======================================
``FASTRAG_STORE``              store URL                                  ``sqlite:///.fastrag/examples.db``
``FASTRAG_LEXICAL_STORE``      a second store for BM25 (for Chroma)       none: BM25 on ``FASTRAG_STORE``
``FASTRAG_EMBEDDING_MODEL``    Model2Vec model folder or name             the static model shipped in fastrag
``FASTRAG_QUESTION``           the question ``10_retrieving.py`` asks     a question about hybrid search
=============================  =========================================  ======================================

A remote store's collection or index is part of its URL (``qdrant://localhost:6333/docs``,
``milvus-lite:///m.db?collection=docs``; see ``docs/stores.md``), so there is no separate variable for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fastrag.config import Settings

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ExampleConfig:
    """What the examples run against; ``settings`` gives it to ``fastrag.config.open_stores``."""

    store: str
    lexical_store: str | None
    embedding_model: str | None
    question: str
    docs_dir: Path


def settings(config: ExampleConfig) -> Settings:
    """The fastrag settings for ``config`` (store URLs and embedding model)."""
    return Settings(store=config.store, lexical_store=config.lexical_store, embedding_model=config.embedding_model)


def config_from_env() -> ExampleConfig:
    """Read the example settings from the environment (see the module docstring)."""
    return ExampleConfig(
        store=os.environ.get("FASTRAG_STORE", "sqlite:///.fastrag/examples.db"),
        lexical_store=os.environ.get("FASTRAG_LEXICAL_STORE") or None,
        embedding_model=os.environ.get("FASTRAG_EMBEDDING_MODEL") or None,
        question=os.environ.get("FASTRAG_QUESTION", "How does hybrid search combine BM25 and vector results?"),
        docs_dir=ROOT / "docs",
    )
