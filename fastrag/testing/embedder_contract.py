"""The contract every :class:`~fastrag.protocols.Embedder` must pass, and its HTTP part for remote APIs.

Subclass :class:`EmbedderContract` in a test module and override two fixtures:

- ``make_embedder``: a function ``(**options) -> embedder`` returning a new, unopened embedder; the options
  are ``batch_size`` and ``max_concurrency`` (and, for :class:`HTTPEmbedderContract`, ``retry`` and
  ``timeout``).
- ``calls``: a :class:`ModelCalls` that sees what reaches the model: the size of every batch, how many ran
  at once, and that can slow the model down or make it fail. :meth:`ModelCalls.wrap` instruments a local
  model's ``encode`` method; :class:`HTTPEmbedderContract` builds one over a :class:`ScriptedHTTPServer`.

::

    class TestMyEmbedder(EmbedderContract):
        @pytest.fixture
        def calls(self, loaded_model):
            return ModelCalls.wrap(loaded_model, "encode", where="my-model")

        @pytest.fixture
        def make_embedder(self, loaded_model):
            return lambda **options: MyEmbedder(model=loaded_model, **options)

:class:`HTTPEmbedderContract` adds the wire: 429 with ``Retry-After``, 500, timeouts, malformed bodies,
refused keys, each against a real local HTTP server answering in the API's own shapes. Its subclasses say
how the API's requests and replies look (:meth:`HTTPEmbedderContract.texts_of`, ``ok``, ``error_body``).

The suite needs ``pytest`` and ``anyio`` (the ``test`` extra).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import numpy as np
import pytest

from fastrag.errors import (
    AuthenticationError,
    BackendError,
    FastragError,
    InvalidParameterError,
    RateLimitError,
    RetrievalTimeoutError,
    TransientBackendError,
)
from fastrag.protocols import Embedder
from fastrag.retry import RetryPolicy
from fastrag.testing.fakes import RecordingSleep
from fastrag.testing.http_server import Reply, ScriptedHTTPServer

__all__ = ["TEXTS", "EmbedderContract", "HTTPEmbedderContract", "ModelCalls"]

TEXTS = [
    "The cat sat on the mat.",
    "A kitten was sitting on the rug near the fire, purring quietly while the rain fell outside.",
    "Quarterly revenue grew by twelve percent.",
    "Photosynthesis converts light into chemical energy in plants.",
    "BM25 ranks documents by term frequency and inverse document frequency.",
]
"""Texts of different lengths (so a batch of them needs padding in a transformer)."""

LONG_TEXT = " ".join(f"word{i} protein folding kinetics" for i in range(3000))
"""About 90,000 characters: past any model's context."""


class ModelCalls:
    """What reached the model: batch sizes, concurrency; and switches to slow it down or break it.

    Attributes:
        batches: the size of every batch the model was asked for, in the order they started.
        max_in_flight: the most batches being computed at once.
        delay: seconds every batch takes (on top of the model's own time); set it to slow the model.
        broken: when ``True``, every batch fails inside the model (a malformed answer, an exception).
        where: what the embedder's errors must name (the endpoint URL, the model folder or name).
    """

    def __init__(self, *, where: str) -> None:
        self.where = where
        self.batches: list[int] = []
        self.max_in_flight = 0
        self.delay = 0.0
        self.broken = False
        self._in_flight = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget the batches seen so far, and the concurrency; stop delaying and breaking."""
        with self._lock:
            self.batches.clear()
            self.max_in_flight = 0
            self.delay = 0.0
            self.broken = False

    def started(self, size: int) -> None:
        """Record a batch of ``size`` texts starting (call :meth:`finished` after it)."""
        with self._lock:
            self.batches.append(size)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def finished(self) -> None:
        with self._lock:
            self._in_flight -= 1

    @classmethod
    def wrap(cls, model: Any, method: str, *, where: str, calls: ModelCalls | None = None) -> ModelCalls:
        """Instrument ``model.<method>(texts, ...)`` (a local model's encode): record each call's batch,
        sleep ``delay`` in it, and raise ``RuntimeError`` from it when ``broken``. Returns the recorder
        (``calls``, to record several models into one, or a new one)."""
        calls = calls if calls is not None else cls(where=where)
        original = getattr(model, method)

        def instrumented(texts: Any, *args: Any, **kwargs: Any) -> Any:
            calls.started(len(texts))
            try:
                if calls.delay:
                    time.sleep(calls.delay)
                if calls.broken:
                    raise RuntimeError("the model broke (ModelCalls.broken)")
                return original(texts, *args, **kwargs)
            finally:
                calls.finished()

        setattr(model, method, instrumented)
        return calls


def _first_vector(value: Any) -> list[Any]:
    """The first list of numbers inside a JSON value (a vector of an API reply), to corrupt it."""
    if isinstance(value, list) and value and all(isinstance(x, float) for x in value):
        return value
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    for child in children:
        if isinstance(child, dict | list):
            try:
                return _first_vector(child)
            except LookupError:
                continue
    raise LookupError("no vector in the reply")


def _norms(vectors: np.ndarray) -> np.ndarray:
    return np.linalg.norm(vectors.astype(np.float64), axis=-1)


class EmbedderContract:
    """Tests every embedder must pass; override ``make_embedder`` and ``calls`` (see the module docstring)."""

    atol = 1e-5
    """How close the vectors of one text must be across batches (float32 arithmetic in another order)."""

    @pytest.fixture
    def make_embedder(self) -> Callable[..., Any]:
        raise NotImplementedError("override make_embedder in the subclass")

    @pytest.fixture
    def calls(self) -> ModelCalls:
        raise NotImplementedError("override calls in the subclass")

    # ---------------------------------------------------------------------------- shapes and values

    @pytest.mark.anyio
    async def test_conforms_to_the_protocol_and_names_its_model(self, make_embedder) -> None:
        async with make_embedder() as embedder:
            await embedder.embed_documents(TEXTS[:1])  # a remote embedder knows its dimension from then on
            assert isinstance(embedder, Embedder)
            assert isinstance(embedder.name, str) and embedder.name.strip()

    @pytest.mark.anyio
    async def test_documents_are_unit_float32_rows_of_the_dimension(self, make_embedder) -> None:
        async with make_embedder() as embedder:
            vectors = await embedder.embed_documents(TEXTS)
            assert vectors.dtype == np.float32
            assert vectors.shape == (len(TEXTS), embedder.dimension)
            np.testing.assert_allclose(_norms(vectors), 1.0, atol=1e-5)
            assert len({v.tobytes() for v in vectors}) == len(TEXTS)  # different texts, different vectors

    @pytest.mark.anyio
    async def test_query_is_one_unit_float32_vector(self, make_embedder) -> None:
        async with make_embedder() as embedder:
            vector = await embedder.embed_query("what converts light into chemical energy?")
            assert vector.dtype == np.float32
            assert vector.shape == (embedder.dimension,)
            assert math.isclose(float(_norms(vector)), 1.0, abs_tol=1e-5)

    @pytest.mark.anyio
    async def test_a_text_gets_the_same_vector_in_any_batch_and_position(self, make_embedder) -> None:
        async with make_embedder(batch_size=2) as small, make_embedder(batch_size=64) as large:
            together = await small.embed_documents(TEXTS)
            reversed_ = await large.embed_documents(TEXTS[::-1])
            alone = np.stack([(await large.embed_documents([t]))[0] for t in TEXTS])
        np.testing.assert_allclose(together, alone, atol=self.atol)
        np.testing.assert_allclose(reversed_[::-1], alone, atol=self.atol)

    @pytest.mark.anyio
    async def test_empty_input_gives_zero_rows(self, make_embedder) -> None:
        async with make_embedder() as embedder:
            vectors = await embedder.embed_documents([])
            assert vectors.dtype == np.float32
            assert vectors.shape == (0, embedder.dimension)

    @pytest.mark.anyio
    async def test_an_empty_string_gives_a_finite_row_never_nan(self, make_embedder) -> None:
        async with make_embedder() as embedder:
            vectors = await embedder.embed_documents(["", TEXTS[0]])
            assert vectors.shape == (2, embedder.dimension)
            assert np.isfinite(vectors).all()
            assert float(_norms(vectors[0])) in (0.0,) or math.isclose(float(_norms(vectors[0])), 1.0, abs_tol=1e-5)

    @pytest.mark.anyio
    async def test_a_long_text_is_embedded(self, make_embedder) -> None:
        async with make_embedder() as embedder:
            vectors = await embedder.embed_documents([LONG_TEXT, TEXTS[0]])
            assert vectors.shape == (2, embedder.dimension)
            np.testing.assert_allclose(_norms(vectors), 1.0, atol=1e-5)

    # ------------------------------------------------------------------------ batching, concurrency

    @pytest.mark.anyio
    async def test_batches_hold_at_most_batch_size_texts(self, make_embedder, calls: ModelCalls) -> None:
        async with make_embedder(batch_size=2) as embedder:
            await embedder.embed_documents(TEXTS[:1])  # loads a lazy model; warms a connection
            calls.reset()
            await embedder.embed_documents(TEXTS)
        assert calls.batches and max(calls.batches) <= 2
        assert sum(calls.batches) == len(TEXTS)
        assert len(calls.batches) == math.ceil(len(TEXTS) / 2)

    @pytest.mark.anyio
    async def test_no_more_than_max_concurrency_batches_run_at_once(self, make_embedder, calls: ModelCalls) -> None:
        async with make_embedder(batch_size=1, max_concurrency=2) as embedder:
            await embedder.embed_documents(TEXTS[:1])
            calls.reset()
            calls.delay = 0.15
            async with anyio.create_task_group() as group:  # two calls at once share the bound
                group.start_soon(embedder.embed_documents, TEXTS)
                group.start_soon(embedder.embed_documents, TEXTS[:3])
        assert sum(calls.batches) == len(TEXTS) + 3
        assert calls.max_in_flight == 2

    @pytest.mark.anyio
    async def test_cancelling_a_call_stops_its_remaining_batches(self, make_embedder, calls: ModelCalls) -> None:
        texts = [f"{t} ({i})" for i in range(2) for t in TEXTS]  # 10 texts, 10 batches of one
        async with make_embedder(batch_size=1, max_concurrency=1) as embedder:
            await embedder.embed_documents(TEXTS[:1])
            calls.reset()
            calls.delay = 0.3
            started = time.monotonic()
            with anyio.move_on_after(0.45) as scope:
                await embedder.embed_documents(texts)
            assert scope.cancelled_caught
            assert time.monotonic() - started < 2.0  # at most the batch being computed finishes
            await anyio.sleep(0.7)
            assert len(calls.batches) <= 3, calls.batches  # not all 10
            calls.reset()
            vectors = await embedder.embed_documents(TEXTS[:2])  # still usable
            assert vectors.shape == (2, embedder.dimension)

    # ----------------------------------------------------------------------------------------- errors

    @pytest.mark.anyio
    async def test_bad_input_is_refused_before_the_model_runs(self, make_embedder, calls: ModelCalls) -> None:
        async with make_embedder() as embedder:
            calls.reset()
            with pytest.raises(InvalidParameterError):
                await embedder.embed_documents("a single string")  # type: ignore[arg-type]
            with pytest.raises(InvalidParameterError):
                await embedder.embed_documents(["fine", 3])  # type: ignore[list-item]
            with pytest.raises(InvalidParameterError):
                await embedder.embed_query(None)  # type: ignore[arg-type]
            assert calls.batches == []

    @pytest.mark.anyio
    async def test_a_model_failure_is_a_typed_error_naming_where(self, make_embedder, calls: ModelCalls) -> None:
        async with make_embedder() as embedder:
            await embedder.embed_documents(TEXTS[:1])
            calls.broken = True
            with pytest.raises(FastragError) as raised:
                await embedder.embed_documents(TEXTS)
            assert calls.where in str(raised.value)

    @pytest.mark.anyio
    async def test_a_closed_embedder_refuses_and_closing_twice_is_fine(self, make_embedder) -> None:
        embedder = make_embedder()
        async with embedder:
            await embedder.embed_documents(TEXTS[:1])
        await embedder.aclose()
        with pytest.raises(FastragError):
            await embedder.embed_documents(TEXTS[:1])


class HTTPEmbedderContract(EmbedderContract):
    """:class:`EmbedderContract` for an embedder behind an HTTP API, against a local server speaking it.

    A subclass sets :attr:`path_prefix` (appended to the server URL to make the base URL), :attr:`path`
    (the endpoint the requests must reach) and implements :meth:`texts_of`, :meth:`ok` and
    :meth:`error_body`; ``make_embedder(server, **options)`` then builds the embedder against
    ``server.url`` (``options``: ``batch_size``, ``max_concurrency``, ``retry``, ``timeout``, ``api_key``).
    The server's script answers with :meth:`ok`, honouring :class:`ModelCalls`' ``delay`` and ``broken``
(``server.answer`` is that step, for tests that script other replies first).
    """

    path_prefix = ""
    path = ""
    api_key = "sk-contract-secret-0123456789"

    def texts_of(self, body: dict[str, Any]) -> list[str]:  # pragma: no cover - overridden
        """The texts a request body asks to embed."""
        raise NotImplementedError

    def ok(self, body: dict[str, Any]) -> Reply:  # pragma: no cover - overridden
        """The API's successful answer to ``body``."""
        raise NotImplementedError

    def error_body(self, message: str) -> dict[str, Any]:  # pragma: no cover - overridden
        """The API's JSON error body carrying ``message``."""
        raise NotImplementedError

    def build(self, server: ScriptedHTTPServer, **options: Any) -> Any:  # pragma: no cover - overridden
        """A new, unopened embedder against ``server.url`` with ``options``."""
        raise NotImplementedError

    @pytest.fixture
    def server(self) -> Iterator[ScriptedHTTPServer]:
        calls = ModelCalls(where="")

        def answer(body: dict[str, Any]) -> Reply:
            calls.started(len(self.texts_of(body)))
            try:
                if calls.delay:
                    time.sleep(calls.delay)
                if calls.broken:
                    return Reply(200, raw=b'{"data": [{"embedding": "not a vector"')
                return self.ok(body)
            finally:
                calls.finished()

        with ScriptedHTTPServer([answer], path_prefix=self.path_prefix) as running:
            calls.where = running.url
            running.calls = calls  # type: ignore[attr-defined]
            running.answer = answer  # type: ignore[attr-defined]
            yield running

    @pytest.fixture
    def calls(self, server: ScriptedHTTPServer) -> ModelCalls:
        return server.calls  # type: ignore[attr-defined]

    @pytest.fixture
    def make_embedder(self, server: ScriptedHTTPServer) -> Callable[..., Any]:
        def make(**options: Any) -> Any:
            options.setdefault("api_key", self.api_key)
            options.setdefault("retry", RetryPolicy(max_attempts=1))
            return self.build(server, **options)

        return make

    # ------------------------------------------------------------------------------------ the wire

    @pytest.mark.anyio
    async def test_requests_reach_the_endpoint_with_the_key(self, make_embedder, server: ScriptedHTTPServer) -> None:
        async with make_embedder() as embedder:
            await embedder.embed_documents(TEXTS[:2])
        assert server.requests[-1].path == self.path
        assert server.requests[-1].headers.get("authorization") == f"Bearer {self.api_key}"
        assert self.texts_of(server.requests[-1].body) == TEXTS[:2]
        assert self.api_key not in repr(embedder)

    @pytest.mark.anyio
    async def test_429_waits_retry_after_then_succeeds(self, make_embedder, server: ScriptedHTTPServer) -> None:
        server.script = [lambda body: Reply(429, self.error_body("slow down"), headers={"retry-after": "2"}), server.answer]
        sleep = RecordingSleep()
        async with make_embedder(retry=RetryPolicy(max_attempts=3, max_backoff=10, sleep=sleep)) as embedder:
            vectors = await embedder.embed_documents(TEXTS[:2])
        assert vectors.shape[0] == 2
        assert len(server.requests) == 2
        assert sleep.delays and sleep.delays[0] >= 2.0

    @pytest.mark.anyio
    async def test_429_past_the_attempts_is_a_rate_limit_error(self, make_embedder, server: ScriptedHTTPServer) -> None:
        server.script = [lambda body: Reply(429, self.error_body("slow down"), headers={"retry-after": "1"})]
        async with make_embedder(retry=RetryPolicy(max_attempts=2, sleep=RecordingSleep())) as embedder:
            with pytest.raises(RateLimitError) as raised:
                await embedder.embed_documents(TEXTS[:2])
        assert raised.value.retry_after == 1.0
        assert server.url in str(raised.value) and "slow down" in str(raised.value)
        assert len(server.requests) == 2

    @pytest.mark.anyio
    async def test_500_is_retried_and_then_raised_as_transient(self, make_embedder, server: ScriptedHTTPServer) -> None:
        server.script = [lambda body: Reply(500, self.error_body("boom")), server.answer]
        async with make_embedder(retry=RetryPolicy(max_attempts=3, sleep=RecordingSleep())) as embedder:
            assert (await embedder.embed_documents(TEXTS[:2])).shape[0] == 2
            assert len(server.requests) == 2
            server.script = [lambda body: Reply(500, self.error_body("boom"))]
            with pytest.raises(TransientBackendError, match="boom"):
                await embedder.embed_documents(TEXTS[:2])
        assert len(server.requests) == 5

    @pytest.mark.anyio
    async def test_a_slow_server_times_out_with_a_typed_error(self, make_embedder, server: ScriptedHTTPServer) -> None:
        server.script = [lambda body: Reply(200, delay=3.0)]
        async with make_embedder(timeout=0.3) as embedder:
            started = time.monotonic()
            with pytest.raises(RetrievalTimeoutError) as raised:
                await embedder.embed_documents(TEXTS[:2])
        assert time.monotonic() - started < 2.5
        assert server.url in str(raised.value)

    @pytest.mark.anyio
    @pytest.mark.parametrize("kind", ["not-json", "too-few", "nan", "strings"])
    async def test_a_malformed_body_is_a_backend_error_not_retried(self, make_embedder, server: ScriptedHTTPServer, kind: str) -> None:
        def malformed(body: dict[str, Any]) -> Reply:
            if kind == "not-json":
                return Reply(200, raw=b"<html>gateway</html>")
            if kind == "too-few":
                return self.ok({**body, **self._with_texts(body, self.texts_of(body)[:-1])})
            reply = self.ok(body)
            _first_vector(reply.body)[0] = math.nan if kind == "nan" else "0.5"
            return Reply(200, raw=json.dumps(reply.body).encode())  # NaN goes out as the literal NaN

        server.script = [malformed]
        async with make_embedder(retry=RetryPolicy(max_attempts=3, sleep=RecordingSleep())) as embedder:
            with pytest.raises(BackendError) as raised:
                await embedder.embed_documents(TEXTS[:3])
        assert not isinstance(raised.value, TransientBackendError)
        assert server.url in str(raised.value)
        assert len(server.requests) == 1

    @pytest.mark.anyio
    @pytest.mark.parametrize(("value", "said"), [(0.0, "all zeros"), (1e200, "beyond float32's range")],
                             ids=["all-zero", "1e200"])  # fmt: skip
    async def test_a_bad_vector_is_refused_naming_the_endpoint_and_the_text(
        self, make_embedder, server: ScriptedHTTPServer, value: float, said: str
    ) -> None:
        """A vector no model produces (all zeros for a text that is not empty; a value no float32 holds) is
        refused, naming the endpoint and the text, never stored as a zero or NaN row."""

        def bad(body: dict[str, Any]) -> Reply:
            reply = self.ok(body)
            vector = _first_vector(reply.body)  # the one text sent: texts[1] of the call (the others are empty)
            vector[:] = [value] * len(vector) if value == 0.0 else [value, *vector[1:]]
            return Reply(200, body=reply.body)

        server.script = [bad]
        async with make_embedder(retry=RetryPolicy(max_attempts=3, sleep=RecordingSleep())) as embedder:
            with pytest.raises(BackendError, match=said) as raised:
                await embedder.embed_documents(["", TEXTS[0], ""])
            with pytest.raises(BackendError, match=f"the query.*{said}"):
                await embedder.embed_query(TEXTS[0])
        assert not isinstance(raised.value, TransientBackendError)
        assert server.url in str(raised.value) and "texts[1]" in str(raised.value)
        assert "texts[0]" not in str(raised.value) and "texts[2]" not in str(raised.value)
        assert len(server.requests) == 2  # not retried

    @pytest.mark.anyio
    async def test_a_refused_key_is_an_authentication_error_that_never_shows_the_key(
        self, make_embedder, server: ScriptedHTTPServer, caplog: pytest.LogCaptureFixture
    ) -> None:
        server.script = [lambda body: Reply(401, self.error_body(f"invalid api key {self.api_key}"))]
        async with make_embedder(retry=RetryPolicy(max_attempts=3, sleep=RecordingSleep())) as embedder:
            with pytest.raises(AuthenticationError) as raised:
                await embedder.embed_documents(TEXTS[:1])
        assert len(server.requests) == 1
        assert self.api_key not in str(raised.value)
        assert self.api_key not in caplog.text

    @pytest.mark.anyio
    async def test_a_bad_request_carries_the_server_message_and_is_not_retried(self, make_embedder, server: ScriptedHTTPServer) -> None:
        server.script = [lambda body: Reply(400, self.error_body("model 'nope' does not exist"))]
        async with make_embedder(retry=RetryPolicy(max_attempts=3, sleep=RecordingSleep())) as embedder:
            with pytest.raises(BackendError, match="does not exist") as raised:
                await embedder.embed_documents(TEXTS[:1])
        assert not isinstance(raised.value, TransientBackendError)
        assert len(server.requests) == 1

    @pytest.mark.anyio
    async def test_retries_log_no_key(self, make_embedder, server: ScriptedHTTPServer, caplog: pytest.LogCaptureFixture) -> None:
        server.script = [lambda body: Reply(503, self.error_body(f"busy {self.api_key}")), server.answer]
        with caplog.at_level("DEBUG"):
            async with make_embedder(retry=RetryPolicy(max_attempts=2, sleep=RecordingSleep())) as embedder:
                await embedder.embed_documents(TEXTS[:1])
        assert "retrying" in caplog.text
        assert self.api_key not in caplog.text

    def _with_texts(self, body: dict[str, Any], texts: list[str]) -> dict[str, Any]:
        """``body`` asking for ``texts`` instead (used to build a reply one vector short)."""
        key = "input" if "input" in body else "texts"
        return {key: texts}
