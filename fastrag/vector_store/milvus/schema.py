"""The collection layout a :class:`~fastrag.vector_store.milvus.MilvusVectorStore` writes: field names, limits,
BM25 parameters, the properties that record how a collection was made, the schema and indexes a new collection
is created with, and the check that an existing collection has that layout and the store's settings."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastrag.errors import ConfigurationError

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

ANALYZERS = ("chinese", "english", "standard")
"""Milvus 2.5's built-in BM25 analyzers, the names ``?analyzer=`` takes (Milvus docs, "Analyzer Overview",
built-in analyzers): ``standard`` (split on word boundaries, lower case: no stemming, no stopwords),
``english`` (``standard`` plus Snowball's English stemmer and the English stopword list: fastrag's own English
analysis, :class:`~fastrag.analysis.Analyzer`), ``chinese`` (jieba word segmentation)."""
DEFAULT_ANALYZER = "english"
"""The analyzer of a new BM25 collection: ``english``, the one that matches the SQLite store's English analysis
(stemming, stopwords), so swapping stores keeps keyword ranking (docs/stores.md, "Same BM25 on every store")."""
UNSTEMMED_DEFAULT_ANALYZER = "standard"
"""The default where the engine has no ``english`` analyzer: milvus-lite 3.x, a Python emulation of Milvus, has
only ``standard`` and ``jieba``. It was the default of every collection before fastrag 0.2's issue 25."""

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


def recorded_at_creation(embedding_model: str | None) -> dict[str, str]:
    """The settings a new collection records (its properties, and its description: :func:`describe`)."""
    recorded = {SCHEMA_PROPERTY: str(SCHEMA_VERSION)}
    if embedding_model is not None:
        recorded[MODEL_PROPERTY] = embedding_model
    return recorded


def collection_schema(
    pymilvus: Any, dimension: int | None, *, enable_bm25: bool, analyzer_params: Mapping[str, Any],
    embedding_model: str | None,
) -> Any:
    """The ``CollectionSchema`` of a new collection: id, content, metadata and filter fields; with ``dimension``
    the dense vector and its presence flag; with ``enable_bm25`` the analysed text and the BM25 function
    feeding the sparse field."""
    schema = pymilvus.MilvusClient.create_schema(
        auto_id=False, enable_dynamic_field=False, description=describe(recorded_at_creation(embedding_model))
    )
    schema.add_field(ID_FIELD, pymilvus.DataType.VARCHAR, is_primary=True, max_length=MAX_VARCHAR_BYTES)
    schema.add_field(CONTENT_FIELD, pymilvus.DataType.VARCHAR, max_length=MAX_VARCHAR_BYTES)
    schema.add_field(METADATA_FIELD, pymilvus.DataType.JSON)
    schema.add_field(FILTER_FIELD, pymilvus.DataType.JSON)
    if dimension is not None:
        schema.add_field(HAS_VECTOR_FIELD, pymilvus.DataType.BOOL)
        schema.add_field(VECTOR_FIELD, pymilvus.DataType.FLOAT_VECTOR, dim=dimension)
    if enable_bm25:
        schema.add_field(
            TEXT_FIELD, pymilvus.DataType.VARCHAR, max_length=MAX_VARCHAR_BYTES,
            enable_analyzer=True, analyzer_params=dict(analyzer_params),
        )  # fmt: skip
        schema.add_field(SPARSE_FIELD, pymilvus.DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(pymilvus.Function(
            name="fastrag_bm25", function_type=pymilvus.FunctionType.BM25,
            input_field_names=[TEXT_FIELD], output_field_names=[SPARSE_FIELD],
        ))  # fmt: skip
    return schema


def index_specs(dimension: int | None, *, enable_bm25: bool, index_params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The indexes of a new collection, as ``add_index`` arguments: the dense one (``index_params``, metric
    COSINE) with ``dimension``, the BM25 sparse inverted index (k1 = 1.2, b = 0.75) with ``enable_bm25``."""
    specs = []
    if dimension is not None:
        dense = {k: v for k, v in index_params.items() if k not in ("metric_type", "field_name", "index_name")}
        dense.setdefault("index_type", "FLAT")
        dense["params"] = dict(dense.get("params") or {})
        specs.append({"field_name": VECTOR_FIELD, "index_name": VECTOR_FIELD, "metric_type": "COSINE", **dense})
    if enable_bm25:
        specs.append({"field_name": SPARSE_FIELD, "index_name": SPARSE_FIELD,
                      "index_type": "SPARSE_INVERTED_INDEX", "metric_type": "BM25",
                      "params": {"bm25_k1": BM25_K1, "bm25_b": BM25_B}})  # fmt: skip
    return specs


def index_params(pymilvus: Any, spec: Mapping[str, Any]) -> Any:
    """pymilvus's ``IndexParams`` holding the one index ``spec`` (an item of :func:`index_specs`)."""
    params = pymilvus.MilvusClient.prepare_index_params()
    params.add_index(**spec)
    return params


@dataclass(frozen=True, slots=True)
class CollectionState:
    """What an existing collection holds, read from ``describe_collection``."""

    dimension: int | None  # None: BM25 only
    has_vectors: bool
    has_bm25: bool
    embedding_model: str | None  # as recorded; None when it recorded none
    analyzer_params: dict[str, Any] | None  # the BM25 field's analyzer; None without BM25


def recorded_analyzer(field: Mapping[str, Any]) -> dict[str, Any]:
    """The analyzer a collection's analysed ``text`` field was created with (``describe_collection`` gives it as
    the JSON text of ``params["analyzer_params"]``); Milvus's own default, ``{"type": "standard"}``, when the
    field records none.

    Raises:
        ConfigurationError: the recorded analyzer is not a JSON object.
    """
    raw = (field.get("params") or {}).get("analyzer_params")
    if raw is None or raw == "":
        return {"type": "standard"}
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(str(raw))
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ConfigurationError(f"the collection's BM25 field records an unreadable analyzer {raw!r}")
    return parsed


def analyzer_name(params: Mapping[str, Any] | None) -> str:
    """A short name of an analyzer in messages and docs: its built-in ``type``, else its JSON."""
    if params is None:
        return "none"
    if set(params) == {"type"}:
        return str(params["type"])
    return json.dumps(dict(params), sort_keys=True)


def check_existing(
    info: Mapping[str, Any], *, name: str, dimension: int | None, enable_bm25: bool, embedding_model: str | None,
    analyzer_params: Mapping[str, Any] | None = None,
) -> CollectionState:
    """The state of the existing collection ``info`` describes, checked against the store's settings.

    Args:
        info: ``describe_collection``'s answer.
        name: the store's name, for messages.
        dimension, enable_bm25, embedding_model, analyzer_params: what the store was opened with (``None``:
            any; an existing collection keeps the analyzer it was created with).

    Raises:
        ConfigurationError: the collection was not created by fastrag, has another schema version, another
            dimension, no BM25 where the store wants it, recorded another embedding model, or its BM25 field
            was created with another analyzer than ``analyzer_params``.
    """
    fields = {f["name"]: f for f in info.get("fields", [])}
    has_bm25 = TEXT_FIELD in fields and SPARSE_FIELD in fields
    has_vectors = VECTOR_FIELD in fields and HAS_VECTOR_FIELD in fields
    required = {ID_FIELD, CONTENT_FIELD, METADATA_FIELD, FILTER_FIELD}
    missing = sorted(required - set(fields))
    recorded = recorded_settings(info)
    if missing or not (has_vectors or has_bm25) or SCHEMA_PROPERTY not in recorded:
        raise ConfigurationError(
            f"{name}: the collection exists but was not created by fastrag (fields {sorted(fields)}); "
            "use another collection name"
        )
    version = recorded[SCHEMA_PROPERTY]
    if str(version) != str(SCHEMA_VERSION):
        raise ConfigurationError(
            f"{name}: the collection has fastrag schema version {version}, this fastrag writes and reads "
            f"version {SCHEMA_VERSION} (its filters need the newer layout); re-index into a new collection"
        )
    dim = int(fields[VECTOR_FIELD].get("params", {}).get("dim")) if has_vectors else None
    if dimension is not None and dim != dimension:
        raise ConfigurationError(
            f"{name}: the collection was built with "
            + (f"dimension={dim}" if dim else "no dense vectors (BM25 only)")
            + f", not dimension={dimension}; use a new collection or the same settings"
        )
    if enable_bm25 and not has_bm25:
        raise ConfigurationError(
            f"{name}: the collection was created without BM25; open it with enable_bm25=False "
            "or use a new collection"
        )
    model = recorded.get(MODEL_PROPERTY) or None
    if embedding_model is not None and model is not None and model != embedding_model:
        raise ConfigurationError(
            f"{name}: the collection was built with embedding_model={model!r}, not {embedding_model!r}; "
            "use a new collection or the same settings"
        )
    analyzer = recorded_analyzer(fields[TEXT_FIELD]) if has_bm25 else None
    if analyzer is not None and analyzer_params is not None and dict(analyzer_params) != analyzer:
        raise ConfigurationError(
            f"{name}: the collection's BM25 text was analysed by Milvus's {analyzer_name(analyzer)!r} analyzer, not "
            f"{analyzer_name(analyzer_params)!r}: its terms and the question's would differ; open it with "
            f"analyzer={analyzer_name(analyzer)} (or no analyzer: a collection keeps its own), or re-index into a "
            "new collection"
        )
    return CollectionState(dimension=dim, has_vectors=has_vectors, has_bm25=has_bm25, embedding_model=model,
                           analyzer_params=analyzer)
