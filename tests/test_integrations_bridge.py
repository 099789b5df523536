"""fastrag.integrations.bridge.run_sync (issue 27.1-3): the adapters' sync entry points run async fastrag on one
background event loop, from plain sync code and from inside a running loop alike; needs no framework."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import anyio
import anyio.lowlevel
import pytest

from fastrag.errors import InvalidParameterError
from fastrag.integrations.bridge import run_sync


async def _where(value: int) -> tuple[int, int]:
    await anyio.lowlevel.checkpoint()
    return value, threading.get_ident()


async def _fail() -> None:
    raise InvalidParameterError("k must be a positive int, got 0")


def test_outside_an_event_loop_every_call_runs_on_one_background_loop() -> None:
    (one, thread_a), (two, thread_b) = run_sync(_where, 1), run_sync(_where, value=2)
    assert (one, two) == (1, 2)
    assert thread_a == thread_b != threading.get_ident()  # one loop: what a first call opens stays usable


@pytest.mark.anyio
async def test_inside_a_running_event_loop_a_sync_call_does_not_deadlock() -> None:
    # anyio.run would refuse here ("already running"); the bridge runs it on its own loop while this one waits
    with pytest.raises(RuntimeError):
        anyio.run(_where, 0)
    assert run_sync(_where, 3)[0] == 3


def test_errors_propagate_with_their_type_and_concurrent_callers_are_served() -> None:
    with pytest.raises(InvalidParameterError, match="positive int"):
        run_sync(_fail)
    with ThreadPoolExecutor(4) as pool:
        assert sorted(v for v, _ in pool.map(lambda i: run_sync(_where, i), range(8))) == list(range(8))


def test_a_sync_call_from_the_background_loop_itself_is_refused() -> None:
    async def nested() -> None:
        run_sync(_where, 1)  # a sync entry point called from inside a search would block its own loop

    with pytest.raises(RuntimeError, match="background event loop itself"):
        run_sync(nested)
