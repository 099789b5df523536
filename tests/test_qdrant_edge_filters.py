"""The Qdrant adapter's filter translation on Qdrant's real engine: ``qdrant-edge-py`` (Qdrant Edge, the Rust
engine in process), not qdrant-client's local mode (a Python re-implementation).

The filter table and generated filters go through :func:`~fastrag.vector_store.qdrant.translate_filter`
(qdrant-client models) and :func:`~fastrag.vector_store.qdrant.edge.to_edge_filter` (the same filter as
``qdrant_edge`` objects), and run on a real edge shard that holds the table's corpus with the payloads the
store writes (:func:`~fastrag.vector_store.qdrant.schema.point_payload`). Each filter runs three ways: a
scroll, an exact count, and a filtered dense query; all three must select exactly what
:func:`fastrag.filters.matches` selects. The shard runs twice: without payload indexes (as the store's
collections are) and with keyword / float / bool indexes on every shadow field, because Qdrant evaluates
an indexed condition through the index instead of the payload.
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from typing import Any

import pytest

pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (fastrag-retrieval[qdrant])")
qe = pytest.importorskip(
    "qdrant_edge", reason="qdrant-edge-py (Qdrant's engine in process) has no wheel for this platform"
)

from hypothesis import HealthCheck, given, settings
from qdrant_client import models as m

from fastrag.errors import UnsupportedFilterError
from fastrag.filters import dump_filter, matches, parse_filter
from fastrag.models import Document
from fastrag.testing.filter_cases import (
    FILTER_CASES,
    FILTER_CORPUS,
    FilterCase,
    filter_strategy,
)
from fastrag.testing.store_contract import corpus_embeddings
from fastrag.vector_store.qdrant import translate_filter
from fastrag.vector_store.qdrant.edge import to_edge_filter
from fastrag.vector_store.qdrant.schema import (
    DENSE,
    SHADOW_FIELD,
    plain_metadata,
    point_id,
    point_payload,
    shadow_fields,
)

DIM = 8
_INDEX_OF_KIND = {"s": "Keyword", "n": "Keyword", "l": "Keyword", "b": "Bool", "r": "Float", "t": "Float"}

ODD_DOCS = [
    Document(id="o1", content="one", metadata={"a.b": "v", "x') OR 1=1 --": "q", 'say "hi"': 1, "Größe": "L"}),
    Document(id="o2", content="two", metadata={"a": {"b": "v"}, "k_x": "plain", "x_6162": "hexlike"}),
    Document(id="o3", content="three", metadata={"ab": "hexlike", "val": "a\\b%_*'\"", "list": ["a\\b", "%"]}),
]


class EdgeShard:
    """A real Qdrant Edge shard holding ``docs`` as the Qdrant store writes them."""

    def __init__(self, docs: list[Document], *, indexed: bool) -> None:
        self.docs = docs
        self.folder = tempfile.mkdtemp(prefix="fastrag-qedge-")
        config = qe.EdgeConfig(vectors={DENSE: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)})
        self.shard = qe.EdgeShard.create(str(pathlib.Path(self.folder) / "shard"), config)
        vectors = corpus_embeddings(docs, DIM)
        points = []
        kinds: set[tuple[str, str]] = set()
        for doc, vector in zip(docs, vectors, strict=True):
            meta = plain_metadata(dict(doc.metadata))
            points.append(qe.Point(id=point_id(doc.id), vector={DENSE: vector.tolist()}, payload=point_payload(doc, meta)))
            kinds.update((key, kind) for key, entry in shadow_fields(meta).items() for kind in entry)
        if indexed:
            for key, kind in sorted(kinds):
                schema = getattr(qe.PayloadSchemaType, _INDEX_OF_KIND[kind])
                self.shard.update(qe.UpdateOperation.create_field_index(f"{SHADOW_FIELD}.{key}.{kind}", schema))
        self.shard.update(qe.UpdateOperation.upsert_points(points))

    def close(self) -> None:
        self.shard.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def select(self, filter_json: Any) -> frozenset[str]:
        """The ids the filter selects; the scroll, the count and the dense query must agree."""
        native = to_edge_filter(translate_filter(filter_json))
        n = len(self.docs)
        records, _ = self.shard.scroll(qe.ScrollRequest(limit=n + 1, filter=native, with_payload=True))
        scrolled = frozenset(r.payload["id"] for r in records)
        counted = self.shard.count(qe.CountRequest(filter=native, exact=True))
        hits = self.shard.query(qe.QueryRequest(
            query=qe.Query.Nearest([1.0] * DIM, using=DENSE), filter=native, limit=n + 1, with_payload=True,
        ))
        queried = frozenset(h.payload["id"] for h in hits)
        assert scrolled == queried, f"scroll {sorted(scrolled)} and query {sorted(queried)} disagree"
        assert counted == len(scrolled), f"count {counted} for {len(scrolled)} scrolled points"
        return scrolled

    def expected(self, filter_json: Any) -> frozenset[str]:
        return frozenset(d.id for d in self.docs if matches(filter_json, d.metadata))


@pytest.fixture(scope="module", params=["plain", "indexed"])
def corpus_shard(request):
    shard = EdgeShard(list(FILTER_CORPUS), indexed=request.param == "indexed")
    yield shard
    shard.close()


@pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: c.name)
def test_filter_table_on_the_qdrant_engine(corpus_shard: EdgeShard, case: FilterCase) -> None:
    assert corpus_shard.select(case.filter) == case.expected_ids


def test_generated_filters_agree_with_matches_on_the_qdrant_engine(corpus_shard: EdgeShard) -> None:
    """300 generated filters (the contract's strategy): the engine selects exactly what ``matches`` selects."""
    seen: list[int] = []

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(filter_json=filter_strategy(FILTER_CORPUS))
    def check(filter_json: dict) -> None:
        assert corpus_shard.select(filter_json) == corpus_shard.expected(filter_json), dump_filter(
            parse_filter(filter_json)
        )
        seen.append(1)

    check()
    assert len(seen) >= 300


@pytest.mark.parametrize(
    ("filter_json", "expected"),
    [
        ({"equals": {"key": "a.b", "value": "v"}}, {"o1"}),  # a dotted key is one key, not a path into "a"
        ({"equals": {"key": "x') OR 1=1 --", "value": "q"}}, {"o1"}),
        ({"equals": {"key": 'say "hi"', "value": 1.0}}, {"o1"}),
        ({"equals": {"key": "Größe", "value": "L"}}, {"o1"}),
        ({"equals": {"key": "x_6162", "value": "hexlike"}}, {"o2"}),  # the encoded names never collide
        ({"equals": {"key": "ab", "value": "hexlike"}}, {"o3"}),
        ({"startsWith": {"key": "val", "value": "a\\b%_*"}}, {"o3"}),
        ({"startsWith": {"key": "val", "value": "a\\b%__"}}, set()),
        ({"stringContains": {"key": "val", "value": "%_*'"}}, {"o3"}),
        ({"stringContains": {"key": "val", "value": ".*"}}, set()),
        ({"listContains": {"key": "list", "value": "%"}}, {"o3"}),
        ({"notEquals": {"key": "x') OR 1=1 --", "value": "q"}}, {"o2", "o3"}),
    ],
)
def test_odd_keys_and_values_on_the_qdrant_engine(filter_json: dict, expected: set[str]) -> None:
    shard = EdgeShard(ODD_DOCS, indexed=False)
    try:
        assert shard.select(filter_json) == expected == shard.expected(filter_json)
    finally:
        shard.close()


def test_conversion_keeps_every_node() -> None:
    """Every condition kind the translation (or a native filter) uses comes out as its edge counterpart."""
    native = m.Filter(
        must=[m.FieldCondition(key="a", match=m.MatchValue(value="x")), m.HasIdCondition(has_id=[point_id("d01")])],
        should=m.FieldCondition(key="b", range=m.Range(gte=1.0, lt=2.0)),
        must_not=[m.IsEmptyCondition(is_empty=m.PayloadField(key="c")),
                  m.FieldCondition(key="d", match=m.MatchExcept(**{"except": ["p", "q"]}))],
        min_should=m.MinShould(conditions=[m.FieldCondition(key="e", match=m.MatchAny(any=["1", "2"]))], min_count=1),
    )
    edge = to_edge_filter(native)
    assert isinstance(edge, qe.Filter)
    assert [type(c).__name__ for c in edge.must] == ["FieldCondition", "HasIdCondition"]
    assert edge.must[0].match.value == "x"
    assert {str(i) for i in edge.must[1].point_ids} == {point_id("d01")}
    assert (edge.should[0].range.gte, edge.should[0].range.lt) == (1.0, 2.0)
    assert edge.must_not[0].key == "c"
    assert list(edge.must_not[1].match.value) == ["p", "q"]
    assert edge.min_should.min_count == 1


def test_geo_conditions_are_refused_not_dropped() -> None:
    native = m.Filter(must=[m.FieldCondition(
        key="where", geo_radius=m.GeoRadius(center=m.GeoPoint(lon=0.0, lat=0.0), radius=10.0),
    )])
    with pytest.raises(UnsupportedFilterError) as info:
        to_edge_filter(native)
    assert info.value.path == "$.must[0]"
