"""What every embedder behind a remote API shares: input checks, batching, a concurrency bound, retries,
reassembly, validation and L2 normalisation. :class:`RemoteEmbedder` is subclassed by
:class:`~fastrag.ingestion.steps.openai_compatible.OpenAICompatibleEmbedder` and
:class:`~fastrag.ingestion.steps.cohere.CohereEmbedder`; a subclass sends one batch (:meth:`_request`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import anyio
import numpy as np

from fastrag.errors import (
    BackendError,
    BackendUnavailableError,
    EmbeddingError,
    InvalidParameterError,
)
from fastrag.ingestion.steps.embedding import l2_normalize
from fastrag.lifecycle import AsyncResource
from fastrag.retry import RetryPolicy

Kind = Literal["document", "query"]
"""Which side of retrieval a text is embedded for."""


def utf8_length(text: str) -> int:
    """The default token count: the text's UTF-8 length in bytes, an upper bound on the tokens of any
    byte-level BPE tokenizer (OpenAI's ``cl100k_base`` and ``o200k_base``, most open models): each token
    covers at least one byte."""
    return len(text.encode("utf-8", "surrogatepass"))


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, refusing a single string and non-strings (:class:`InvalidParameterError`)."""
    if isinstance(texts, str | bytes):
        raise InvalidParameterError("texts must be a sequence of strings, not a single string")
    batch = list(texts)
    for i, text in enumerate(batch):
        if not isinstance(text, str):
            raise InvalidParameterError(f"texts[{i}] must be a string, got {type(text).__name__}")
    return batch


def check_positive(value: object, label: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidParameterError(f"{label} must be a positive int, got {value!r}")


def plan_batches(
    lengths: Sequence[int], *, max_texts: int, max_tokens: int | None
) -> list[tuple[int, int]]:
    """Cut ``len(lengths)`` consecutive texts into ``[start, stop)`` batches of at most ``max_texts`` texts
    and at most ``max_tokens`` tokens in all (``lengths`` are per-text token counts). A text longer than
    ``max_tokens`` on its own is a batch of its own (the server decides what to do with it)."""
    batches: list[tuple[int, int]] = []
    start, tokens = 0, 0
    for i, length in enumerate(lengths):
        full = i - start >= max_texts or (max_tokens is not None and i > start and tokens + length > max_tokens)
        if full:
            batches.append((start, i))
            start, tokens = i, 0
        tokens += length
    if start < len(lengths):
        batches.append((start, len(lengths)))
    return batches


def first_error(group: BaseExceptionGroup) -> BaseException:
    """The error to raise for a failed task group: its first ``Exception`` leaf (the batch that failed),
    or the group itself when it holds anything else (a cancellation, KeyboardInterrupt)."""
    leaves: list[BaseException] = []

    def walk(g: BaseExceptionGroup) -> None:
        for exc in g.exceptions:
            walk(exc) if isinstance(exc, BaseExceptionGroup) else leaves.append(exc)

    walk(group)
    if any(not isinstance(e, Exception) for e in leaves):
        return group
    return leaves[0]


class RemoteEmbedder(AsyncResource):
    """Base of the HTTP embedders: subclasses set ``self._where`` (the endpoint, for messages), the
    attributes below through :meth:`_setup`, record the provider client they create with ``_own`` (so
    ``aclose()`` closes it, and it closes its HTTP client only when it created that too), and implement
    :meth:`_request` and ``name``."""

    _where: str
    _label: str

    def _setup(
        self,
        *,
        dimensions: int | None,
        batch_size: int,
        max_batch_tokens: int | None,
        count_tokens: Callable[[str], int] | None,
        max_concurrency: int,
        retry: RetryPolicy | None,
        max_text_characters: int | None,
    ) -> None:
        check_positive(dimensions, "dimensions", optional=True)
        check_positive(batch_size, "batch_size")
        check_positive(max_batch_tokens, "max_batch_tokens", optional=True)
        check_positive(max_concurrency, "max_concurrency")
        check_positive(max_text_characters, "max_text_characters", optional=True)
        if count_tokens is not None and not callable(count_tokens):
            raise InvalidParameterError(f"count_tokens must be a function of a text, got {count_tokens!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidParameterError(f"retry must be a RetryPolicy, got {retry!r}")
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.count_tokens = count_tokens or utf8_length
        self.max_concurrency = max_concurrency
        self.max_text_characters = max_text_characters
        self.retry = retry or RetryPolicy()
        self._dimension: int | None = dimensions
        self._limiter = anyio.CapacityLimiter(max_concurrency)

    # ----------------------------------------------------------------------------------- the protocol

    @property
    def dimension(self) -> int:
        """Width of every vector: ``dimensions`` when given, else learnt from the first response.

        Raises:
            EmbeddingError: read before any response and without ``dimensions`` (call :meth:`load`, or
                embed something, first).
        """
        if self._dimension is None:
            raise EmbeddingError(
                f"{self._label}'s dimension is not known before its first response: pass dimensions=, or "
                f"await load() (one short request) or embed something first ({self._where})"
            )
        return self._dimension

    async def load(self) -> None:
        """Learn the dimension now, with one request embedding ``"dimension probe"``, unless it is known.

        Raises:
            BackendError: as :meth:`embed_documents`.
        """
        if self._dimension is None:
            await self.embed_query("dimension probe")

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` for indexing (with the document prefix or input type).

        Returns:
            ``(len(texts), dimension)`` float32, L2-normalised rows (a dot product is cosine similarity, in
            [-1, 1]). An empty string is not sent and gives an all-zero row; empty input gives ``(0,
            dimension)`` (after one probe request when the dimension is not known yet).

        Raises:
            InvalidParameterError: ``texts`` is a single string or holds a non-string.
            AuthenticationError: the key was refused.
            RateLimitError: still rate limited after the retries (or asked to wait longer than the
                policy's ``max_backoff``).
            RetrievalTimeoutError: a request still timed out after the retries.
            TransientBackendError: a 5xx or a dropped connection, after the retries.
            BackendUnavailableError: the endpoint cannot be reached, or the embedder is closed.
            BackendError: any other status (400, 404, 422: the server's message is included), or a response
                that does not fit the request (not JSON, a missing, short, ragged or non-finite vector, values
                beyond float32's range, an all-zero vector for a text that is not empty, a width other than
                ``dimensions``); every one names the endpoint, and a bad vector names the text it is for
                (``texts[3]``).
        """
        return await self._embed(check_texts(texts), "document")

    async def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (with the query prefix or input type).

        Returns:
            ``(dimension,)`` float32, L2-normalised (all zero for an empty string).

        Raises:
            InvalidParameterError: ``text`` is not a string.
            BackendError: as :meth:`embed_documents`.
        """
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a string, got {type(text).__name__}")
        return (await self._embed([text], "query"))[0]

    # -------------------------------------------------------------------------------------- internals

    async def _request(self, texts: list[str], kind: Kind) -> list[list[float]]:  # pragma: no cover
        """Send one batch; the raw vectors, one per text, in order. Errors are fastrag's."""
        raise NotImplementedError

    async def _embed(self, texts: list[str], kind: Kind) -> np.ndarray:
        if self.closed:
            raise BackendUnavailableError(f"the {self._label} is closed", store=self._where)
        if self.max_text_characters is not None:
            texts = [t[: self.max_text_characters] for t in texts]
        sent = [i for i, t in enumerate(texts) if t]
        if not sent and self._dimension is None:
            await self.load()
        batches = plan_batches(
            [self.count_tokens(texts[i]) for i in sent] if self.max_batch_tokens is not None else [0] * len(sent),
            max_texts=self.batch_size,
            max_tokens=self.max_batch_tokens,
        )
        results: list[np.ndarray | None] = [None] * len(batches)

        async def run(b: int) -> None:
            start, stop = batches[b]
            batch = [texts[i] for i in sent[start:stop]]
            async with self._limiter:
                raw = await self.retry.call(self._request, batch, kind)
            results[b] = self._checked(raw, sent[start:stop], kind)

        if len(batches) == 1:
            await run(0)
        elif batches:
            try:
                async with anyio.create_task_group() as group:
                    for b in range(len(batches)):
                        group.start_soon(run, b)
            except BaseExceptionGroup as failed:
                error = first_error(failed)
                if error is failed:
                    raise
                raise error from None
        dimension = self.dimension
        out = np.zeros((len(texts), dimension), dtype=np.float32)
        for (start, stop), rows in zip(batches, results, strict=True):
            assert rows is not None
            if rows.shape[1] != dimension:  # an earlier batch of this call fixed another width
                raise BackendError(
                    f"the server returned vectors of width {rows.shape[1]} after width {dimension}", store=self._where
                )
            out[sent[start:stop]] = rows
        return out

    def _checked(self, raw: object, positions: Sequence[int], kind: Kind) -> np.ndarray:
        """``raw`` as ``(n, dim)`` float32 L2-normalised rows, ``n = len(positions)``; :class:`BackendError`,
        naming the endpoint, for anything else. ``positions`` are the rows' places in the call's texts, for
        naming the texts whose vectors are bad."""
        n = len(positions)
        where = self._where
        if not isinstance(raw, list) or len(raw) != n:
            count = len(raw) if isinstance(raw, list) else type(raw).__name__
            raise BackendError(f"the response has {count} vectors for {n} texts", store=where)
        widths = {len(v) if isinstance(v, list) else -1 for v in raw}
        if len(widths) != 1 or -1 in widths or 0 in widths:
            raise BackendError(f"the response's vectors are missing, empty or ragged (widths {sorted(widths)})",
                               store=where)
        if any(type(x) is not float and type(x) is not int for v in raw for x in v):  # bools and strings too
            raise BackendError("the response's vectors hold values that are not numbers", store=where)
        try:
            matrix = np.array(raw, dtype=np.float64)
        except OverflowError as exc:  # an int too large for a float
            raise BackendError("the response's vectors hold numbers too large for a float", store=where) from exc
        if not np.isfinite(matrix).all():
            raise BackendError("the response's vectors hold NaN or infinite values", store=where)
        largest = np.abs(matrix).max(axis=1)
        beyond = [positions[i] for i in np.flatnonzero(largest > _FLOAT32_MAX)]
        if beyond:
            raise BackendError(
                f"the response's vector for {_texts(beyond, kind)} holds values beyond float32's range "
                f"(|x| up to {largest.max():.3g}, the largest float32 is {_FLOAT32_MAX:.3g}): not an embedding",
                store=where,
            )
        width = int(matrix.shape[1])
        if self.dimensions is not None and width != self.dimensions:
            raise BackendError(f"asked for dimensions={self.dimensions}, the server returned width {width}",
                               store=where)
        if self._dimension is None:
            self._dimension = width
        elif width != self._dimension:
            raise BackendError(f"the server returned vectors of width {width}, earlier ones had {self._dimension}",
                               store=where)
        # each row scaled by its largest magnitude first (the direction is unchanged), so that squaring in
        # float32 can neither overflow nor underflow the norm
        scaled = np.divide(matrix, largest[:, None], out=np.zeros_like(matrix), where=largest[:, None] > 0)
        rows = l2_normalize(scaled)
        zero = [positions[i] for i in np.flatnonzero(~rows.any(axis=1))]
        if zero:
            raise BackendError(
                f"the response's vector for {_texts(zero, kind)} is all zeros, for a text that is not empty: a zero "
                "vector has no direction, so no similarity to it means anything",
                store=where,
            )
        return rows


_FLOAT32_MAX = float(np.finfo(np.float32).max)  # 3.4028235e38


def _texts(positions: Sequence[int], kind: Kind) -> str:
    """How a message names the texts at ``positions`` of a call: ``"the query"``, ``"texts[3]"``,
    ``"texts[3], texts[7]"`` (the first ten, then how many more)."""
    if kind == "query":
        return "the query"
    named = ", ".join(f"texts[{p}]" for p in positions[:10])
    return named if len(positions) <= 10 else f"{named} and {len(positions) - 10} more"


def is_number(value: object) -> bool:
    """A finite int or float, not a bool."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
