"""`run_sync`: executor coroutines from synchronous code, on one loop per thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kpl_lab.engine.executor import run_sync


async def running_loop() -> asyncio.AbstractEventLoop:
    await asyncio.sleep(0)
    return asyncio.get_running_loop()


async def fail() -> None:
    raise ValueError("no such job")


def test_calls_of_one_thread_share_its_loop():
    first, second = run_sync(running_loop()), run_sync(running_loop())
    assert first is second and not first.is_closed()
    other = {}
    thread = threading.Thread(target=lambda: other.update(loop=run_sync(running_loop())))
    thread.start()
    thread.join()
    assert other["loop"] is not first


def test_errors_reach_the_caller_and_the_loop_goes_on():
    with pytest.raises(ValueError, match="no such job"):
        run_sync(fail())
    assert run_sync(running_loop()) is run_sync(running_loop())


def test_inside_a_running_loop():
    async def server() -> tuple:
        return asyncio.get_running_loop(), run_sync(running_loop())

    outer, inner = asyncio.run(server())
    assert inner is not outer
    with pytest.raises(ValueError, match="no such job"):
        asyncio.run(_raise_inside())


async def _raise_inside() -> None:
    run_sync(fail())
