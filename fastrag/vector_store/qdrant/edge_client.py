"""A prototype: the part of qdrant-client's synchronous ``QdrantClient`` that
:class:`~fastrag.vector_store.qdrant.QdrantVectorStore` calls, served by Qdrant Edge shards (Qdrant's own engine
in process, ``qdrant-edge-py``) instead of local mode's Python re-implementation.

:class:`EdgeClient` takes and returns qdrant-client models, so the store runs unchanged over it
(``QdrantVectorStore(edge_path=FOLDER)``, URL ``qdrant+edge:///PATH``). Layout: one shard per collection in
``FOLDER/<collection>/shard`` and the collection metadata, which a shard cannot hold, in
``FOLDER/<collection>/collection.json`` (written to a temporary file and renamed). A collection created
without a dense vector gets a placeholder sparse vector ``_none`` (a shard needs at least one vector).

What it does not do (see ``docs/backends/qdrant.md``): build HNSW (Qdrant Edge builds it only in a blocking
``optimize()``; searches here are exact over plain segments), serve several processes (a shard folder is
locked to one), or run the calls the store never makes.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fastrag.errors import BackendError, BackendUnavailableError, ConfigurationError
from fastrag.vector_store.qdrant.connection import import_models
from fastrag.vector_store.qdrant.edge import import_edge, to_edge_filter

_META_FILE = "collection.json"
_PLACEHOLDER = "_none"
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class EdgeClient:
    """``QdrantClient``-shaped access to Qdrant Edge shards under ``path`` (created with the first collection).

    Synchronous and not thread-safe on its own: the store calls it from worker threads under its lock.

    Raises:
        ConfigurationError: qdrant-edge-py or qdrant-client is not installed.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._m = import_models()
        self._e = import_edge()
        self.path = Path(path)  # created with the first collection, so a mistyped read-only path stays absent
        self._shards: dict[str, Any] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ collections

    def _folder(self, name: str) -> Path:
        if not _NAME.fullmatch(name) or name in (".", ".."):
            raise ConfigurationError(f"a Qdrant Edge collection name is letters, digits, '_', '.', '-': {name!r}")
        return self.path / name

    def _shard(self, name: str) -> Any:
        shard = self._shards.get(name)
        if shard is None:
            folder = self._folder(name)
            if not (folder / _META_FILE).exists():
                raise BackendError(f"collection {name!r} does not exist in {self.path}")
            try:
                shard = self._e.EdgeShard.load(str(folder / "shard"))
            except Exception as exc:
                # qdrant-edge-py raises a bare Exception; a held WAL lock is the one case with a clear remedy
                if "WouldBlock" in str(exc):
                    raise BackendUnavailableError(
                        f"the shard {folder / 'shard'} is open in another store or process; close that one first"
                    ) from exc
                raise
            self._shards[name] = shard
        return shard

    def _read_meta(self, name: str) -> dict[str, Any]:
        return json.loads((self._folder(name) / _META_FILE).read_text(encoding="utf-8"))

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        target = self._folder(name) / _META_FILE
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta), encoding="utf-8")
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)

    def collection_exists(self, collection_name: str) -> bool:
        return (self._folder(collection_name) / _META_FILE).exists()

    def create_collection(self, collection_name: str, vectors_config: Any, metadata: Any = None, **_: Any) -> bool:
        e = self._e
        folder = self._folder(collection_name)
        if self.collection_exists(collection_name):
            raise BackendError(f"collection {collection_name!r} already exists")
        if folder.exists() and any(folder.iterdir()):
            raise ConfigurationError(
                f"{folder} holds files but no {_META_FILE}: not a fastrag Qdrant Edge collection (or a creation "
                "that did not finish); remove the folder or use another collection name"
            )
        folder.mkdir(parents=True, exist_ok=True)
        dense = {name: (p.size, p.distance.value) for name, p in (vectors_config or {}).items()}
        for name, (_, distance) in dense.items():
            if distance != "Cosine":
                raise ConfigurationError(f"the Qdrant Edge prototype supports cosine only, not {distance} ({name})")
        if dense:
            config = e.EdgeConfig(vectors={
                n: e.EdgeVectorParams(size=size, distance=e.Distance.Cosine) for n, (size, _) in dense.items()
            })
        else:
            config = e.EdgeConfig(sparse_vectors={_PLACEHOLDER: e.EdgeSparseVectorParams()})
        self._shards[collection_name] = e.EdgeShard.create(str(folder / "shard"), config)
        self._write_meta(collection_name, {"metadata": metadata or {}, "vectors": {n: s for n, (s, _) in dense.items()}})
        return True

    def get_collection(self, collection_name: str) -> Any:
        meta = self._read_meta(collection_name)
        self._shard(collection_name)
        vectors = {
            name: SimpleNamespace(size=size, distance=self._m.Distance.COSINE) for name, size in meta["vectors"].items()
        }
        return SimpleNamespace(config=SimpleNamespace(metadata=meta["metadata"], params=SimpleNamespace(vectors=vectors)))

    def update_collection(self, collection_name: str, metadata: Any = None, **_: Any) -> bool:
        meta = self._read_meta(collection_name)
        meta["metadata"] = {**meta["metadata"], **(metadata or {})}
        self._write_meta(collection_name, meta)
        return True

    def create_vector_name(self, collection_name: str, vector_name: str, vector_name_config: Any, **_: Any) -> bool:
        dense = vector_name_config.dense
        self._shard(collection_name).update(
            self._e.UpdateOperation.create_dense_vector(vector_name, dense.size, self._e.Distance.Cosine)
        )
        meta = self._read_meta(collection_name)
        meta["vectors"][vector_name] = dense.size
        self._write_meta(collection_name, meta)
        return True

    def create_payload_index(self, collection_name: str, field_name: str, field_schema: Any, **_: Any) -> Any:
        e, m = self._e, self._m
        if not isinstance(field_schema, m.TextIndexParams):
            raise ConfigurationError(f"the Qdrant Edge prototype creates text indexes only, not {field_schema!r}")
        if field_schema.tokenizer != m.TokenizerType.WORD or field_schema.scoring is None:
            raise ConfigurationError("the Qdrant Edge prototype creates word-tokenized, BM25-scored text indexes only")
        params = e.TextIndexParams(tokenizer=e.TokenizerType.Word, lowercase=bool(field_schema.lowercase), scoring=True)
        self._shard(collection_name).update(e.UpdateOperation.create_field_index(field_name, params))
        return True

    # ------------------------------------------------------------------ points

    def upsert(self, collection_name: str, points: list[Any], **_: Any) -> Any:
        e = self._e
        shard = self._shard(collection_name)
        converted = [
            e.Point(id=str(p.id), vector={k: list(v) for k, v in (p.vector or {}).items()}, payload=p.payload)
            for p in points
        ]
        shard.update(e.UpdateOperation.upsert_points(converted))
        return True

    def delete(self, collection_name: str, points_selector: Any, **_: Any) -> Any:
        if not isinstance(points_selector, self._m.PointIdsList):
            raise ConfigurationError("the Qdrant Edge prototype deletes by point ids only")
        ids = [str(i) for i in points_selector.points]
        self._shard(collection_name).update(self._e.UpdateOperation.delete_points(ids))
        return True

    def count(self, collection_name: str, count_filter: Any = None, exact: bool = True, **_: Any) -> Any:
        request = self._e.CountRequest(exact=True, filter=self._filter(count_filter))
        return SimpleNamespace(count=self._shard(collection_name).count(request))

    def scroll(
        self, collection_name: str, scroll_filter: Any = None, limit: int = 10, offset: Any = None,
        with_payload: Any = True, with_vectors: Any = False, **_: Any,
    ) -> tuple[list[Any], Any]:
        request = self._e.ScrollRequest(
            offset=None if offset is None else str(offset), limit=limit, filter=self._filter(scroll_filter),
            with_payload=with_payload, with_vector=bool(with_vectors),
        )
        records, next_offset = self._shard(collection_name).scroll(request)
        out = [SimpleNamespace(id=str(r.id), payload=r.payload) for r in records]
        return out, None if next_offset is None else str(next_offset)

    def query_points(self, collection_name: str, **request: Any) -> Any:
        return self._query(self._shard(collection_name), request)

    def query_batch_points(self, collection_name: str, requests: list[Any], **_: Any) -> list[Any]:
        shard = self._shard(collection_name)
        return [self._query(shard, {
            "query": r.query, "using": r.using, "query_filter": r.filter, "limit": r.limit,
            "with_payload": r.with_payload, "prefetch": r.prefetch,
        }) for r in requests]

    def close(self) -> None:
        with self._lock:
            shards, self._shards = self._shards, {}
        for shard in shards.values():
            shard.close()

    # ------------------------------------------------------------------ conversion

    def _filter(self, native: Any) -> Any:
        return None if native is None else to_edge_filter(native)

    def _scoring(self, query: Any, using: str | None) -> Any:
        e, m = self._e, self._m
        if isinstance(query, list):
            return e.Query.Nearest([float(x) for x in query], using=using)
        if isinstance(query, m.TextQuery):
            bm25 = query.text.scoring.bm25 if query.text.scoring is not None else None
            scoring = None if bm25 is None else e.Bm25Params(k=bm25.k, b=bm25.b)
            return e.TextQuery(field=using, query=query.text.query, scoring=scoring)
        if isinstance(query, m.RrfQuery):
            return e.Fusion.Rrf(k=query.rrf.k, weights=query.rrf.weights)
        if isinstance(query, m.FusionQuery) and query.fusion == m.Fusion.DBSF:
            return e.Fusion.Dbsf()
        raise ConfigurationError(f"the Qdrant Edge prototype does not run {type(query).__name__} queries")

    def _query(self, shard: Any, request: dict[str, Any]) -> Any:
        e = self._e
        prefetches = [
            e.Prefetch(limit=p.limit, query=self._scoring(p.query, p.using), filter=self._filter(p.filter))
            for p in (request.get("prefetch") or [])
        ]
        points = shard.query(e.QueryRequest(
            limit=request["limit"], query=self._scoring(request["query"], request.get("using")),
            prefetches=prefetches or None, filter=self._filter(request.get("query_filter")),
            with_payload=request.get("with_payload", False),
        ))
        return SimpleNamespace(points=[SimpleNamespace(id=str(p.id), score=p.score, payload=p.payload) for p in points])
