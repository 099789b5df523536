"""Pluggable ingestion steps: embedders."""

from fastrag.ingestion.steps.embedding import DEFAULT_MODEL, Model2VecEmbedder, l2_normalize

__all__ = ["DEFAULT_MODEL", "Model2VecEmbedder", "l2_normalize"]
