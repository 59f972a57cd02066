"""Hooks built in several threads, each running its own event loop (machines run from threads)."""

from __future__ import annotations

import asyncio
import threading

from engines import Place

from workhive_flatmachines import WorkhiveWorkerHooks


def test_hooks_in_two_threads_each_get_a_handle_of_their_own(place: Place) -> None:
    """A handle serves one event loop: machines run in threads (each with asyncio.run) must not share one."""
    handles: list[object] = []
    errors: list[BaseException] = []
    # Both loops run at once: each thread waits for the other before and after its first call.
    together = threading.Barrier(2, timeout=120)
    first_built = threading.Event()

    def worker(n: int) -> None:
        async def run() -> None:
            if n == 1:
                assert first_built.wait(timeout=120)  # built after thread 0's: a cache would hand over thread 0's
            hooks = WorkhiveWorkerHooks(place.url, **place.options)
            handles.append(hooks.handle)
            first_built.set()
            together.wait()
            try:
                await hooks.on_action("register_worker", {"worker_id": f"w{n}"})
            finally:
                together.wait()

        try:
            asyncio.run(run())
        except BaseException as exc:  # reported below, with the thread's error
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(handles) == 2 and handles[0] is not handles[1]
