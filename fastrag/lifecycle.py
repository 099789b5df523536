"""One lifecycle for everything that holds a resource: stores, embedders, rerankers, model-API clients.

:class:`AsyncResource` is the implementation behind :class:`~fastrag.protocols.AsyncCloseable` (the
protocol stays the plug-in boundary: a third-party store need not inherit from anything). A subclass says
what it releases (:meth:`AsyncResource._aclose`) and, when ``async with`` should open something first, what
it opens (:meth:`AsyncResource._aopen`); the base gives it the rest, the same for every class:

* ``async with resource as r`` awaits ``_aopen()`` and binds ``r`` to ``resource`` itself. When ``_aopen``
  raises, the resource is closed (``aclose()``) before the error propagates, since ``__aexit__`` will never
  run; a class whose failed open holds nothing and may be tried again sets ``_close_if_enter_fails = False``.
* ``__aexit__`` awaits ``aclose()`` and never swallows the exception of the block.
* ``aclose()`` releases the resource once. The resource counts as closed from the moment the first call
  starts (:attr:`AsyncResource.closed` is true at once, so new calls are refused while it releases);
  a call made while that close runs waits for it to finish, and any later call returns at once.
* A failed close is not retried: when ``_aclose()`` raises, that first ``aclose()`` call raises the error
  (adapters raise :class:`~fastrag.errors.BackendError`, chained), the resource stays closed, and later
  or concurrent calls return without error. Releasing twice a half-released resource (a connection pool, a
  Milvus Lite server) is not safe, and the caller that closed it has been told.
* Owned against injected: a client the resource creates is recorded with :meth:`AsyncResource._own` and
  closed by ``aclose()`` after ``_aclose()`` (newest first, each even when an earlier one failed); a client
  the caller passed in is never recorded, so never closed.

Examples:
    >>> import anyio
    >>> from fastrag.lifecycle import AsyncResource
    >>> class Connection(AsyncResource):
    ...     async def _aclose(self):
    ...         print("released")
    >>> async def main():
    ...     async with Connection() as conn:
    ...         pass
    ...     await conn.aclose()  # a second close: nothing happens
    ...     return conn.closed
    >>> anyio.run(main)
    released
    True
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar, Protocol, Self, TypeVar

import anyio

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Awaitable

__all__ = ["AsyncResource"]


class _Closeable(Protocol):
    def aclose(self) -> Awaitable[None]: ...


_C = TypeVar("_C", bound=_Closeable)


class AsyncResource:
    """Base class of an object holding resources: an async context manager with an idempotent ``aclose()``.

    Subclasses override :meth:`_aclose` (release what they hold) and, optionally, :meth:`_aopen` (what
    entering ``async with`` opens first). They need not call ``super().__init__()``: the base keeps its
    state in class-level defaults until the first close.

    The rules every subclass inherits (module :mod:`fastrag.lifecycle` gives the reasons): ``aclose()``
    runs ``_aclose()`` at most once, concurrent calls wait for that one, later ones return at once; the
    resource is :attr:`closed` from the moment the first call starts; a failed close raises once and is not
    retried; the clients recorded with :meth:`_own` are closed after ``_aclose()``, newest first, and
    nothing else is (an injected client stays the caller's).

    A resource is closed from one event loop: a call waiting for a close that runs in another loop is not
    supported.
    """

    _close_if_enter_fails: ClassVar[bool] = True
    """Whether a failed :meth:`_aopen` closes the resource before ``async with`` re-raises. ``False`` for a
    class whose failed open holds nothing and that may be opened again (a model that failed to load)."""

    # the state, kept as class-level defaults so that a subclass need not call super().__init__()
    __closed: bool = False
    __closing: anyio.Event | None = None
    __owned: tuple[_Closeable, ...] = ()

    @property
    def closed(self) -> bool:
        """Whether ``aclose()`` has been called (true from the moment the first call starts)."""
        return self.__closed

    async def aclose(self) -> None:
        """Release the resource, once: ``_aclose()``, then every client recorded with :meth:`_own`.

        Idempotent and safe under concurrent calls: the first call closes; one made while it runs waits for
        it to end; later calls return at once. An injected client is never closed.

        Raises:
            BackendError: (or whatever the subclass's ``_aclose`` or an owned client's ``aclose`` raises)
                releasing failed. Raised by the first call only: the resource stays closed and is not
                released again.
        """
        if self.__closed:
            closing = self.__closing
            if closing is not None:
                await closing.wait()
            return
        self.__closed = True
        closing = self.__closing = anyio.Event()
        try:
            async with AsyncExitStack() as stack:
                for resource in self.__owned:
                    stack.push_async_callback(resource.aclose)  # run last, newest first
                await self._aclose()
        finally:
            self.__closing = None
            closing.set()

    async def __aenter__(self) -> Self:
        """Open the resource (:meth:`_aopen`) and return it.

        Raises:
            Whatever ``_aopen`` raises (after closing the resource, unless ``_close_if_enter_fails`` is
            false).
        """
        try:
            await self._aopen()
        except BaseException:
            if self._close_if_enter_fails:
                await self.aclose()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _aopen(self) -> None:
        """What entering ``async with`` opens (nothing by default; a subclass that opens lazily overrides it)."""

    async def _aclose(self) -> None:
        """Release what this object holds, itself (nothing by default). Called once, by the first ``aclose()``;
        :attr:`closed` is already true. The clients recorded with :meth:`_own` are closed after it."""

    def _own(self, resource: _C) -> _C:
        """Record ``resource``, which this object created, to be closed (its ``aclose()``) by ``aclose()``;
        return it. Call it only for what the object created, never for a client the caller passed in."""
        self.__owned = (*self.__owned, resource)
        return resource
