"""The collection layout a :class:`~fastrag.vector_store.milvus.MilvusVectorStore` writes: field names, limits,
BM25 parameters and the properties that record how a collection was made."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

ID_FIELD = "id"
CONTENT_FIELD = "content"
METADATA_FIELD = "metadata"
FILTER_FIELD = "filter_values"
HAS_VECTOR_FIELD = "has_vector"
VECTOR_FIELD = "embedding"
TEXT_FIELD = "text"
SPARSE_FIELD = "sparse"

MAX_VARCHAR_BYTES = 65535
"""Milvus's largest VARCHAR; ids, contents and BM25 texts longer than this (UTF-8 bytes) are refused."""
BM25_K1 = 1.2
BM25_B = 0.75
"""BM25 parameters set on the sparse index (Milvus's defaults): Robertson & Zaragoza (2009), "The Probabilistic
Relevance Framework: BM25 and Beyond"."""
MAX_TOP_K = 16384
"""Milvus's largest ``limit`` for one search."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The integers Milvus's JSON fields hold; metadata integers beyond them are refused."""

SCHEMA_PROPERTY = "fastrag.schema_version"
MODEL_PROPERTY = "fastrag.embedding_model"
SCHEMA_VERSION = 2
"""2: negation-free filter layout (presence markers, list elements as keys); 1 (fastrag 0.1 before it) used
``exists`` and ``not``, which Milvus 2.5 refuses."""
COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")

_DESCRIPTION = "fastrag documents "


def describe(recorded: Mapping[str, str]) -> str:
    """The collection description: ``fastrag documents {json}``, the JSON holding the schema version and the
    embedding model. The same settings also go into the collection properties; the description carries them
    where properties are not implemented (milvus-lite 2.5.1 keeps none)."""
    return _DESCRIPTION + json.dumps(dict(recorded), sort_keys=True, ensure_ascii=False)


def recorded_settings(info: Mapping[str, Any]) -> dict[str, str]:
    """The settings a collection recorded (``describe_collection``'s answer): its properties over what its
    description holds (see :func:`describe`); ``{}`` for a collection fastrag did not create."""
    recorded: dict[str, str] = {}
    description = str(info.get("description") or "")
    if description.startswith(_DESCRIPTION):
        try:
            parsed = json.loads(description[len(_DESCRIPTION):])
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            recorded.update({str(k): str(v) for k, v in parsed.items()})
    properties = info.get("properties") or {}
    recorded.update({k: str(v) for k, v in properties.items() if k in (SCHEMA_PROPERTY, MODEL_PROPERTY)})
    return recorded
