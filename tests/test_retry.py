"""RetryPolicy and RetryingStore: bounded exponential backoff with full jitter, Retry-After, transient only.

No test sleeps: the policy's ``sleep`` is a recorder, and the recorded delays are what is asserted.
"""

from __future__ import annotations

import random
import sqlite3

import pytest

from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    FilterError,
    InvalidParameterError,
    RetrievalTimeoutError,
    TransientBackendError,
)
from fastrag.models import Document
from fastrag.protocols import LexicalStore, SupportsGet, VectorStore
from fastrag.retrieval import BM25Retriever, HybridRetriever, VectorRetriever
from fastrag.retry import RetryingStore, RetryPolicy
from fastrag.testing.fakes import HashingEmbedder, InMemoryStore
from fastrag.testing.faults import FaultyStore
from fastrag.vector_store.sqlite import SQLiteVectorStore

pytestmark = pytest.mark.anyio


class Recorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def policy(**kwargs) -> tuple[RetryPolicy, Recorder]:
    sleep = Recorder()
    return RetryPolicy(sleep=sleep, **{"initial_backoff": 0.01, "max_backoff": 0.08, "jitter": False, **kwargs}), sleep


class Flaky:
    """Fails ``failures`` times with ``error()``, then returns ``value``; counts calls."""

    def __init__(self, failures: int, error=lambda: TransientBackendError("connection reset"), value="ok") -> None:
        self.failures, self.error, self.value, self.calls = failures, error, value, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error()
        return self.value


async def test_a_transient_failure_is_retried_until_it_passes() -> None:
    retry, sleep = policy(max_attempts=3)
    fn = Flaky(failures=2)
    assert await retry.call(fn) == "ok"
    assert fn.calls == 3 and sleep.delays == [0.01, 0.02]  # exponential: initial, initial * multiplier


async def test_attempts_are_bounded_and_the_last_error_is_raised() -> None:
    retry, sleep = policy(max_attempts=4)
    errors: list[TransientBackendError] = []

    def make() -> TransientBackendError:
        errors.append(TransientBackendError(f"503 number {len(errors)}"))
        return errors[-1]

    fn = Flaky(failures=100, error=make)
    with pytest.raises(TransientBackendError) as caught:
        await retry.call(fn)
    assert fn.calls == 4 and len(sleep.delays) == 3 and caught.value is errors[-1]


async def test_one_attempt_means_no_retry() -> None:
    retry, sleep = policy(max_attempts=1)
    fn = Flaky(failures=1)
    with pytest.raises(TransientBackendError):
        await retry.call(fn)
    assert fn.calls == 1 and sleep.delays == []


async def test_backoff_grows_then_stays_at_the_cap() -> None:
    retry, sleep = policy(max_attempts=8, initial_backoff=0.01, multiplier=2, max_backoff=0.05)
    with pytest.raises(TransientBackendError):
        await retry.call(Flaky(failures=100))
    assert sleep.delays == [0.01, 0.02, 0.04, 0.05, 0.05, 0.05, 0.05]


async def test_full_jitter_draws_each_delay_between_zero_and_its_cap() -> None:
    sleep = Recorder()
    retry = RetryPolicy(max_attempts=40, initial_backoff=0.01, multiplier=1.5, max_backoff=0.2, jitter=True,
                        sleep=sleep, rng=random.Random(7))  # fmt: skip
    with pytest.raises(TransientBackendError):
        await retry.call(Flaky(failures=100))
    caps = [min(0.2, 0.01 * 1.5**n) for n in range(39)]
    assert len(sleep.delays) == 39 and all(0 <= d <= cap for d, cap in zip(sleep.delays, caps, strict=True))
    assert len(set(sleep.delays)) == 39  # drawn, not fixed


async def test_429_with_retry_after_waits_at_least_that_long() -> None:
    retry, sleep = policy(max_attempts=3)
    fn = Flaky(failures=2, error=lambda: TransientBackendError("429 too many requests", retry_after=0.05))
    assert await retry.call(fn) == "ok"
    assert sleep.delays == [0.05, 0.05]  # max(backoff, Retry-After); never less than the server asked


async def test_a_retry_after_beyond_max_backoff_fails_at_once() -> None:
    retry, sleep = policy(max_attempts=5, max_backoff=0.08)
    fn = Flaky(failures=1, error=lambda: TransientBackendError("503", retry_after=60))
    with pytest.raises(TransientBackendError):
        await retry.call(fn)
    assert fn.calls == 1 and sleep.delays == []


@pytest.mark.parametrize(
    "error",
    [lambda: BackendError("500 internal error"), lambda: BackendUnavailableError("auth failed"),
     lambda: InvalidParameterError("400 bad request"), lambda: FilterError("bad filter"), lambda: ValueError("x"),
     lambda: RuntimeError("bug")],
)  # fmt: skip
async def test_errors_not_marked_transient_are_never_retried(error) -> None:
    retry, sleep = policy(max_attempts=5)
    fn = Flaky(failures=1, error=error)
    with pytest.raises(Exception) as caught:
        await retry.call(fn)
    assert not isinstance(caught.value, TransientBackendError)
    assert fn.calls == 1 and sleep.delays == []


async def test_a_timeout_is_transient() -> None:
    retry, _ = policy(max_attempts=2)
    fn = Flaky(failures=1, error=lambda: RetrievalTimeoutError("slow", timeout=1.0))
    assert await retry.call(fn) == "ok" and fn.calls == 2


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"max_attempts": 2.5}, {"max_attempts": True}, {"initial_backoff": -1},
     {"max_backoff": float("inf")}, {"multiplier": 0.5}, {"initial_backoff": 10, "max_backoff": 1}],
)  # fmt: skip
def test_bad_policies_are_rejected(kwargs) -> None:
    with pytest.raises(InvalidParameterError):
        RetryPolicy(**kwargs)


# ------------------------------------------------------------------------------------ RetryingStore


async def corpus_store() -> InMemoryStore:
    store, embedder = InMemoryStore(), HashingEmbedder()
    docs = [Document(id="a", content="solar power"), Document(id="b", content="wind power")]
    await store.upsert(docs, embeddings=await embedder.embed_documents([d.content for d in docs]))
    return store


async def test_reads_are_retried_and_answer_as_the_store() -> None:
    faulty = FaultyStore(await corpus_store(), failures=2, error=lambda: TransientBackendError("reset"))
    retry, sleep = policy(max_attempts=3)
    store = RetryingStore(faulty, policy=retry)
    assert [d.id for d in await store.search_text("solar", k=2)] == ["a"]
    assert [m for m, _ in faulty.calls] == ["search_text"] * 3 and len(sleep.delays) == 2
    embedding = await HashingEmbedder().embed_query("wind")
    reads = {
        "count": (lambda: store.count(), 2),
        "get": (lambda: store.get(ids=["b"]), [faulty.store._items["b"][0]]),
        "search_vector": (lambda: store.search_vector(embedding, k=1), None),
    }
    for method, (call, expected) in reads.items():
        faulty.calls.clear()
        faulty.failures, faulty.failed = 1, 0
        answer = await call()
        assert [m for m, _ in faulty.calls] == [method, method]
        assert answer == expected if expected is not None else answer[0].id == "b"


async def test_a_hybrid_over_a_flaky_store_answers_correctly() -> None:
    faulty = FaultyStore(await corpus_store(), failures=3, error=lambda: TransientBackendError("503"))
    store = RetryingStore(faulty, policy=policy(max_attempts=5)[0])
    embedder = HashingEmbedder()
    hybrid = HybridRetriever([VectorRetriever(vector_store=store, embedder=embedder), BM25Retriever(store=store)])
    expected = await HybridRetriever([VectorRetriever(vector_store=faulty.store, embedder=embedder),
                                      BM25Retriever(store=faulty.store)]).retrieve("solar power", k=2)  # fmt: skip
    assert await hybrid.retrieve("solar power", k=2) == expected


async def test_delete_is_never_retried_and_upsert_only_when_declared_idempotent() -> None:
    transient = lambda: TransientBackendError("reset")  # noqa: E731
    faulty = FaultyStore(InMemoryStore(), failures=1, error=transient)
    store = RetryingStore(faulty, policy=policy(max_attempts=3)[0])
    with pytest.raises(TransientBackendError):
        await store.delete(ids=["a"])
    faulty.failed = 0
    with pytest.raises(TransientBackendError):  # InMemoryStore does not declare idempotent_upsert
        await store.upsert([Document(id="a", content="x")])
    faulty.idempotent_upsert = True
    faulty.failed = 0
    await store.upsert([Document(id="a", content="x")])
    assert [m for m, _ in faulty.calls] == ["delete", "upsert", "upsert", "upsert"]
    assert await faulty.store.count() == 1


async def test_the_wrapper_has_exactly_the_stores_capabilities() -> None:
    class VectorOnly:
        async def upsert(self, documents, *, embeddings=None): ...
        async def search_vector(self, embedding, *, k, filter=None): ...  # noqa: A002
        async def delete(self, *, ids=None, filter=None): ...  # noqa: A002
        async def count(self, *, filter=None): ...  # noqa: A002

    wrapped = RetryingStore(VectorOnly())
    assert isinstance(wrapped, VectorStore)
    assert not isinstance(wrapped, LexicalStore) and not isinstance(wrapped, SupportsGet)
    full = RetryingStore(InMemoryStore())
    assert isinstance(full, VectorStore) and isinstance(full, LexicalStore) and isinstance(full, SupportsGet)


async def test_sqlite_busy_is_transient_and_a_retried_upsert_succeeds(tmp_path) -> None:
    path = tmp_path / "busy.db"
    async with SQLiteVectorStore(path) as store:
        await store.upsert([Document(id="a", content="first")])
        store._conn.execute("PRAGMA busy_timeout = 0")  # fail at once instead of after 5 s
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            with pytest.raises(TransientBackendError, match="busy"):
                await store.upsert([Document(id="b", content="second")])

            async def release_then_wait(seconds: float) -> None:
                if other.in_transaction:
                    other.execute("COMMIT")

            retrying = RetryingStore(store, policy=RetryPolicy(sleep=release_then_wait, jitter=False))
            await retrying.upsert([Document(id="b", content="second")], embeddings=None)
        finally:
            other.close()
        assert await store.count() == 2
        assert [d.id for d in await store.search_text("second", k=2)] == ["b"]


def test_retry_after_seconds_reads_every_form_the_model_apis_send() -> None:
    import email.utils
    import time

    from fastrag.retry import retry_after_seconds

    assert retry_after_seconds({"Retry-After": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5  # the finer one wins
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after_seconds({"RETRY-AFTER": soon}) <= 31
    assert retry_after_seconds({"retry-after": email.utils.formatdate(0, usegmt=True)}) == 0.0  # in the past
    for absent in (None, {}, {"retry-after": "soon"}, {"retry-after": "-1"}, {"retry-after": "nan"},
                   {"retry-after-ms": "inf"}):
        assert retry_after_seconds(absent) is None
