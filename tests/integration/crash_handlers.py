"""Handlers that end their own worker process, in each way a handler can (imported by worker processes).

Items marked ``bad`` end the process the way ``WORKHIVE_TEST_HOW`` names; every other item returns
at once. A handler holding a key quotes it in its last words, as a real one might.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import time
from typing import Any


def _key(ctx: Any) -> str:
    return ctx.credential.secret.reveal() if ctx.credential is not None else "no-key"


def _end_the_process(ctx: Any) -> None:
    how = os.environ["WORKHIVE_TEST_HOW"]
    if how == "system_exit":
        raise SystemExit(f"fatal: key {_key(ctx)}")
    if how == "keyboard_interrupt":
        raise KeyboardInterrupt(f"giving up with key {_key(ctx)}")
    if how == "os_exit":
        os._exit(3)
    if how == "sigsegv":
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file wherever the test runs
        ctypes.string_at(0)  # a real segfault, as in a C extension
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    # A signal to the process may land a moment after kill() returns: never carry on meanwhile.
    time.sleep(60)
    raise AssertionError(f"the process survived {how}")


def ends_its_process(ctx: Any) -> dict[str, Any]:
    if ctx.data.get("bad"):
        _end_the_process(ctx)
    return {"n": ctx.data["n"]}


async def ends_its_process_async(ctx: Any) -> dict[str, Any]:
    if ctx.data.get("bad"):
        _end_the_process(ctx)
    return {"n": ctx.data["n"]}
