"""The handler the fault suite's fleets run (imported by worker processes through PYTHONPATH).

Its result is a function of the item and the claim's fencing token
(``expected_result``), so the checker can tell that a DONE item's result came
from its final claim and from nothing else. An item's data names what else the
handler does (``fault``):

* ``raise``: raises ``FaultRaised`` quoting the API key, as an API's error body would;
* ``exit``: ``SystemExit(3)``; ``os_exit``: ``os._exit(7)``; ``signal``: SIGKILLs its own
  process; ``segv``: dereferences NULL (a real segmentation fault);
* ``canary``: completes, with the API key in its result as is, URL-encoded and
  JSON-escaped (a handler that echoes a request);
* ``second_handle`` (SQLite): opens and closes a second hive handle on the fleet's own
  database file in this process while the worker's handle is in use.

The API key is the fleet's credential (``--credentials env:FAULTKEY``), the canary
that must never appear in any output or stored row.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import json
import os
import signal
import urllib.parse
from typing import Any

import workhive

__all__ = ["FaultRaised", "expected_result", "handle", "latch"]

#: faults that must end in POISONED (with a reason) however the fleet recovers
POISONING = ("raise", "exit", "os_exit", "signal", "segv")


class FaultRaised(RuntimeError):
    """The exception a ``raise`` item's handler raises."""


def expected_result(item_id: str, token: int, data: Any) -> str:
    """The digest a completion of claim ``token`` of ``item_id`` carries."""
    text = f"{item_id}|{token}|{json.dumps(data, sort_keys=True)}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _key(ctx: Any) -> str:
    credential = ctx.credential
    if credential is None:
        raise RuntimeError("the fault suite runs its fleets with --credentials env:FAULTKEY")
    return str(credential.secret.reveal())


async def _second_handle(ctx: Any) -> None:
    url = os.environ["WORKHIVE_FAULTS_STORAGE"]
    async with workhive.open(url) as other:
        await other.pool(ctx.pool.name).stats()


async def handle(ctx: Any) -> dict[str, Any]:
    """Does what the item's ``fault`` says, then returns ``{"token", "digest"}`` (plus any echo)."""
    fault = ctx.data.get("fault")
    if fault == "latch":
        return await latch(ctx)
    result: dict[str, Any] = {
        "token": ctx.item.token,
        "digest": expected_result(ctx.item.id, ctx.item.token, ctx.data),
    }
    if fault == "raise":
        raise FaultRaised(f"the API said 500 for key {_key(ctx)} (item {ctx.data['n']})")
    if fault == "exit":
        raise SystemExit(3)
    if fault == "os_exit":
        os._exit(7)
    if fault == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(60)  # the signal lands first
    if fault == "segv":
        ctypes.string_at(0)
    if fault == "canary":
        key = _key(ctx)
        result["echo"] = {
            "raw": f"Authorization: Bearer {key}",
            "url": "https://api.example/v1?key=" + urllib.parse.quote(key, safe=""),
            "json": json.dumps({"key": key}),
        }
    if fault == "second_handle":
        await _second_handle(ctx)
    delay = float(os.environ.get("WORKHIVE_FAULTS_SLEEP", "0"))
    if delay:
        await asyncio.sleep(delay)
    return result


async def latch(ctx: Any) -> dict[str, Any]:
    """Holds the pool open (``--until-empty`` cannot end) until the nemesis has injected every fault.

    The nemesis creates ``WORKHIVE_FAULTS_LATCH`` when its schedule is done; only then
    does this item complete, so every scheduled fault lands while the fleet is running,
    however fast or slow the machine is.
    """
    path = os.environ["WORKHIVE_FAULTS_LATCH"]
    # The file is written by the test process: there is no event to wait on across processes.
    while not os.path.exists(path):  # noqa: ASYNC110, ASYNC240
        await asyncio.sleep(0.05)
    return {"token": ctx.item.token, "digest": expected_result(ctx.item.id, ctx.item.token, ctx.data)}
