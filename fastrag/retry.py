"""Retries for transient backend failures: bounded exponential backoff with full jitter, honouring Retry-After.

::

    from fastrag.retry import RetryPolicy, RetryingStore

    store = RetryingStore(QdrantVectorStore(...), policy=RetryPolicy(max_attempts=4))
    retriever = HybridRetriever([VectorRetriever(vector_store=store, embedder=e), BM25Retriever(store=store)])

What is retried, and what never is:

- Only :class:`~fastrag.errors.TransientBackendError` (and its subclass
  :class:`~fastrag.errors.RetrievalTimeoutError`): adapters raise it for connection resets, timeouts,
  HTTP 429 and 503. Errors about the request itself (every ``ValueError`` subclass: bad parameters,
  malformed or unsupported filters, dimension mismatches; HTTP 4xx other than 429) and any other
  :class:`~fastrag.errors.BackendError` are raised at once.
- Only idempotent calls. :class:`RetryingStore` retries the reads (``search_vector``, ``search_text``,
  ``search_text_scoped``, ``count``, ``get``); it retries ``upsert`` only when the wrapped store declares
  ``idempotent_upsert = True`` (its upsert replaces by id, so sending a batch twice leaves the same state),
  and never ``delete`` (a retried delete that had taken effect would report 0 removed).

The delay before retry ``n`` (1-based) is ``min(max_backoff, initial_backoff * multiplier ** (n - 1))``,
drawn uniformly from ``[0, that]`` with ``jitter=True`` ("full jitter": Brooker, *Exponential Backoff And
Jitter*, AWS Architecture Blog, 2015), so clients that failed together do not retry together. When the
error carries ``retry_after`` (the backend's ``Retry-After``, in seconds) the delay is at least that; a
``retry_after`` longer than ``max_backoff`` ends the retries at once (the error is raised), since waiting
less than the server asked is pointless and waiting longer than ``max_backoff`` is more than the caller
allowed.

The retry loop is `tenacity <https://tenacity.readthedocs.io>`_'s ``AsyncRetrying``; the delays and the
stop rule above are ours. Sleeping goes through ``RetryPolicy.sleep`` (default :func:`anyio.sleep`), so
cancelling a call cancels its wait too.
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import anyio
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, stop_any

from fastrag.errors import InvalidParameterError, TransientBackendError
from fastrag.lifecycle import AsyncResource

__all__ = ["IDEMPOTENT_READS", "RetryPolicy", "RetryingStore", "retry_after_seconds"]

logger = logging.getLogger("fastrag.retry")

P = ParamSpec("P")
T = TypeVar("T")

IDEMPOTENT_READS = frozenset({"search_vector", "search_text", "search_text_scoped", "count", "get"})
"""The store methods :class:`RetryingStore` always retries."""


def _is_transient(error: BaseException) -> bool:
    return isinstance(error, TransientBackendError)


def _retry_after(error: BaseException | None) -> float | None:
    value = getattr(error, "retry_after", None)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure.

    Args:
        max_attempts: attempts in all, the first included (1 disables retrying).
        initial_backoff: the cap of the first delay, in seconds.
        max_backoff: the largest delay, in seconds; also the longest ``retry_after`` that is honoured.
        multiplier: the factor between consecutive caps (>= 1).
        jitter: draw each delay uniformly from ``[0, cap]`` (full jitter); ``False`` waits the cap itself.
        sleep: ``await sleep(seconds)`` waits; inject a recorder in tests.
        rng: the random source for jitter (``rng.uniform(a, b)``); seed one for reproducible delays.

    Raises:
        InvalidParameterError: ``max_attempts`` is not an int >= 1; a backoff is negative or not finite;
            ``initial_backoff > max_backoff``; ``multiplier < 1``.
    """

    max_attempts: int = 3
    initial_backoff: float = 0.1
    max_backoff: float = 5.0
    multiplier: float = 2.0
    jitter: bool = True
    sleep: Callable[[float], Awaitable[Any]] = field(default=anyio.sleep, repr=False, compare=False)
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise InvalidParameterError(f"max_attempts must be an int >= 1, got {self.max_attempts!r}")
        for name in ("initial_backoff", "max_backoff", "multiplier"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise InvalidParameterError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.initial_backoff > self.max_backoff:
            raise InvalidParameterError(
                f"initial_backoff ({self.initial_backoff}) must not exceed max_backoff ({self.max_backoff})"
            )
        if self.multiplier < 1:
            raise InvalidParameterError(f"multiplier must be >= 1, got {self.multiplier!r}")

    def backoff(self, retry: int, error: BaseException | None = None) -> float:
        """The delay in seconds before retry number ``retry`` (1 = the first retry) after ``error``."""
        try:
            cap = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        except OverflowError:
            cap = self.max_backoff
        delay = self.rng.uniform(0.0, cap) if self.jitter else cap
        wanted = _retry_after(error)
        return delay if wanted is None else max(delay, wanted)

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        return self.backoff(state.attempt_number, error)

    def _retry_after_too_long(self, state: RetryCallState) -> bool:
        error = state.outcome.exception() if state.outcome is not None else None
        wanted = _retry_after(error)
        return wanted is not None and wanted > self.max_backoff

    async def call(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``await fn(*args, **kwargs)``, retrying transient failures under this policy.

        Only call it with an idempotent ``fn``: it may run up to ``max_attempts`` times.

        Returns:
            What ``fn`` returns.

        Raises:
            Exception: the last transient error once the attempts are spent (or at once when its
                ``retry_after`` exceeds ``max_backoff``); any other error at once, unchanged.
        """
        name = getattr(fn, "__qualname__", None) or repr(fn)

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            wait = state.upcoming_sleep
            logger.warning(
                "%s failed (attempt %d of %d), retrying in %.3f s: %s",
                name, state.attempt_number, self.max_attempts, wait, error,
            )  # fmt: skip

        retrying = AsyncRetrying(
            stop=stop_any(stop_after_attempt(self.max_attempts), self._retry_after_too_long),
            wait=self._wait,
            retry=retry_if_exception(_is_transient),
            sleep=self.sleep,
            before_sleep=log_retry,
            reraise=True,
        )
        return await retrying(fn, *args, **kwargs)


class RetryingStore(AsyncResource):
    """Wraps a store so that its idempotent calls are retried under a :class:`RetryPolicy`.

    ``search_vector``, ``search_text``, ``search_text_scoped``, ``count`` and ``get`` are retried; ``upsert`` only when the store
    sets ``idempotent_upsert = True``; ``delete`` and everything else pass through unchanged. The wrapper
    has exactly the methods of the wrapped store, so protocol checks (``isinstance(s, SupportsGet)``)
    answer for the store. Closing the wrapper closes the store.

    Args:
        store: any store (:class:`~fastrag.protocols.VectorStore`, :class:`~fastrag.protocols.LexicalStore`).
        policy: the retry policy (default ``RetryPolicy()``).
    """

    def __init__(self, store: Any, *, policy: RetryPolicy | None = None) -> None:
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise InvalidParameterError(f"policy must be a RetryPolicy, got {policy!r}")
        self.store = store
        self.policy = policy or RetryPolicy()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)  # AttributeError when the store lacks it: capabilities stay truthful
        retried = name in IDEMPOTENT_READS or (name == "upsert" and getattr(self.store, "idempotent_upsert", False) is True)
        if not retried or not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self.policy.call(attr, *args, **kwargs)

        call.__name__ = call.__qualname__ = f"{type(self.store).__name__}.{name}"
        return call

    async def _aclose(self) -> None:
        """Close the wrapped store (``aclose()``; :attr:`closed` is the wrapper's own)."""
        close = getattr(self.store, "aclose", None)
        if close is not None:
            await close()

    def __repr__(self) -> str:
        return f"RetryingStore({self.store!r}, policy={self.policy!r})"


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The wait an HTTP response asks for, in seconds, from its headers; ``None`` when it asks for none.

    Reads ``retry-after-ms`` (milliseconds, sent by some model APIs), else ``Retry-After`` as delta-seconds
    or an HTTP date (RFC 9110, section 10.2.3; a date in the past is 0). Header names are matched
    case-insensitively; a malformed, negative or non-finite value counts as absent.
    """
    if not headers:
        return None
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    try:
        if "retry-after-ms" in lower:
            value = float(lower["retry-after-ms"]) / 1000.0
            return value if math.isfinite(value) and value >= 0 else None
        raw = lower.get("retry-after")
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = max(0.0, email.utils.parsedate_to_datetime(raw).timestamp() - time.time())
        return value if math.isfinite(value) and value >= 0 else None
    except (TypeError, ValueError, OverflowError):
        return None
