"""Plain-function handlers for the thread-run tests (in-process: they record into module state)."""

from __future__ import annotations

import threading
from typing import Any

#: (item number, thread id) of every call, in call order
calls: list[tuple[int, int]] = []
#: set by a test: a callable run inside the handler with the item number (to stop the runtime, …)
during: Any = None


def record(ctx: Any) -> dict[str, int]:
    n = ctx.data["n"]
    calls.append((n, threading.get_ident()))
    if during is not None:
        during(n)
    what = ctx.data.get("do")
    if what == "boom":
        raise RuntimeError(f"boom on {n}")
    if what == "exit":
        raise SystemExit(3)
    return {"n": n}


async def _later(n: int) -> dict[str, int]:
    return {"n": n, "awaited": 1}


def returns_coroutine(ctx: Any) -> Any:
    calls.append((ctx.data["n"], threading.get_ident()))
    return _later(ctx.data["n"])
