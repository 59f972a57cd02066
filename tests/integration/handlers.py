"""Small handlers the runtime tests run (imported by worker processes through PYTHONPATH)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from typing import Any
from urllib.parse import quote, quote_plus

import workhive

NOT_A_FUNCTION = 42


def noop(ctx: Any) -> None:
    return None


async def noop_async(ctx: Any) -> None:
    """Never yields: a lane runs its whole batch in one go (the scaling tests)."""
    return None


def seems_to_take(ctx: Any) -> None:
    """Takes ``ctx.data["seconds"]`` on the worker module's clock, where a test replaced it with one it can move
    (test_runtime_claim_size's ``_Clock``), and no real time."""
    from workhive.runtime import worker

    worker.time.skipped += ctx.data["seconds"]  # type: ignore[attr-defined]


def echo_sync(ctx: Any) -> dict[str, Any]:
    return {"n": ctx.data["n"], "attempt": ctx.attempt, "worker": ctx.worker_id, "sync": True}


async def echo_async(ctx: Any) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"n": ctx.data["n"], "attempt": ctx.attempt, "worker": ctx.worker_id, "sync": False}


def signals(ctx: Any) -> Any:
    """Does what the item says: ok, rate_limit, auth, permanent, boom, bad_result."""
    what = ctx.data["do"]
    if what == "rate_limit":
        raise workhive.RateLimited(retry_after=0.01)
    if what == "auth":
        raise workhive.AuthFailed(reason="401 from the test API")
    if what == "permanent":
        raise workhive.Permanent("this input can never work")
    if what == "boom":
        raise RuntimeError("transient boom")
    if what == "bad_result":
        return {"not json": object()}
    if what == "rate_limit_once" and ctx.item.releases == 0:
        raise workhive.RateLimited(retry_after=0.01)
    return {"ok": what, "credential": getattr(ctx.credential, "name", None)}


def _log_line(line: str) -> None:
    path = os.environ.get("WORKHIVE_TEST_LOG")
    if path:
        with open(path, "a") as f:  # one short append per call: atomic enough for tests
            f.write(line + "\n")


def tokened(ctx: Any) -> dict[str, Any]:
    """Records the claim (id, token, pid) and returns it as the result, so a test can tell which claim won."""
    _log_line(f"{ctx.item.id} {ctx.item.token} {os.getpid()}")
    delay = float(os.environ.get("WORKHIVE_TEST_SLEEP", "0"))
    if delay:
        time.sleep(delay)
    return {"token": ctx.item.token, "pid": os.getpid()}


def crashy(ctx: Any) -> dict[str, Any]:
    """Kills its own process for items marked ``crash``; everything else succeeds."""
    if ctx.data.get("crash"):
        os._exit(1)
    return {"n": ctx.data["n"]}


def slow(ctx: Any) -> dict[str, Any]:
    """Sleeps ``seconds`` (in the thread pool), recording start and end."""
    _log_line(f"start {ctx.item.id}")
    time.sleep(float(ctx.data["seconds"]))
    _log_line(f"end {ctx.item.id}")
    return {"slept": ctx.data["seconds"]}


def auth_for(ctx: Any) -> dict[str, Any]:
    """Fails authentication only with the credential named in the item's ``bad``."""
    if ctx.credential is not None and ctx.credential.name == ctx.data["bad"]:
        raise workhive.AuthFailed(reason=f"401 for {ctx.credential.name}")
    return {"credential": getattr(ctx.credential, "name", None)}


def leaky(ctx: Any) -> dict[str, Any]:
    """Quotes the item's key back through every path a handler has: a 401 reason, exceptions, its logger."""
    key = ctx.credential.secret.reveal()
    body = '{"error": "Incorrect API key provided: ' + key + '"}'
    what = ctx.data["do"]
    ctx.logger.warning("calling the API with %s", key)
    if what == "auth" and ctx.credential.name == ctx.data.get("bad"):
        raise workhive.AuthFailed(reason=f"HTTP 401: {body}")
    if what == "permanent":
        raise workhive.Permanent(f"the API refused: {body}")
    if what == "boom":
        raise RuntimeError(f"HTTP 500: {body}")
    if what == "rate_limit":
        raise workhive.RateLimited(f"HTTP 429: {body}", retry_after=0.01)
    return {"ok": what}


def leaky_encoded(ctx: Any) -> dict[str, Any]:
    """Returns its key in the result (as is, nested, as an object key), or quotes it encoded in an error."""
    key = ctx.credential.secret.reveal()
    what = ctx.data["do"]
    if what == "quote_plus":
        raise RuntimeError(f"GET https://api.example/v1?key={quote_plus(key)} -> 401")
    if what == "quote":
        lower_hex = re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quote(key, safe=""))
        raise workhive.Permanent(f"the API refused key={lower_hex}")
    if what == "json":
        # As PHP and some Java encoders write it: "/" escaped as "\/", non-ASCII as \uXXXX.
        raise workhive.Permanent("HTTP 401: " + json.dumps({"error": {"key": key}}).replace("/", "\\/"))
    return {"echo": f"called with {key}", "nested": {"list": [key, {"again": key}], "n": 1}, key: "as a key"}


#: what a hostile API body may carry: clear the screen, set the clipboard (OSC 52), a C1 CSI
CLEAR, CLIPBOARD, C1_CSI = "\x1b[2J", "\x1b]52;c;ZXZpbA==\x07", "\x9b1m"


def terminal_mess(ctx: Any) -> dict[str, Any]:
    """Raises, logs or returns text with terminal control sequences in it."""
    if ctx.data["do"] == "boom":
        ctx.logger.warning("the API said %s", CLIPBOARD)
        raise RuntimeError(f"boom {CLEAR} {CLIPBOARD} {C1_CSI}")
    return {"note": f"result {CLEAR} {CLIPBOARD} {C1_CSI}"}


def killer_beside_innocents(ctx: Any) -> dict[str, Any]:
    """The ``killer`` item takes its process down once three innocents run beside it in that process.

    Innocents, on their first run, wait for the killer to fire (so they are in flight when it does);
    afterwards they return at once. The marker file (``WORKHIVE_TEST_MARKER``) says it has fired.
    """
    marker = os.environ["WORKHIVE_TEST_MARKER"]
    log = os.environ["WORKHIVE_TEST_LOG"]
    deadline = time.monotonic() + 60
    if ctx.data.get("killer"):
        while not os.path.exists(marker) and time.monotonic() < deadline:
            with open(log) as f:
                beside = [line for line in f.read().splitlines() if line.endswith(f" {os.getpid()}")]
            if len(beside) >= 3:
                open(marker, "w").close()
                break
            time.sleep(0.01)
        os._exit(1)
    if not os.path.exists(marker):
        _log_line(f"start {ctx.item.id} {os.getpid()}")
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
    return {"n": ctx.data["n"]}


def bulky(ctx: Any) -> dict[str, Any]:
    """Returns a 16 KB result: enough of them fill a small disk mid-run."""
    return {"n": ctx.data["n"], "pad": "x" * 16384}


def modules_seen(ctx: Any) -> dict[str, Any]:
    """What the worker process had imported by its first items (the start-up path, test_runtime_seam)."""
    import sys

    watched = ("importlib.metadata", "workhive.runtime.supervisor", "workhive.runtime.fleet", "workhive.cli")
    return {"imported": [m for m in watched if m in sys.modules], "plugins_env": "WORKHIVE_PLUGINS_FOUND" in os.environ}


def where(ctx: Any) -> dict[str, Any]:
    """Where this worker process runs: how it started, its session, and the pipes it holds besides its own."""
    import sys

    pipes = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if fd > 2 and target.startswith("pipe:"):
            pipes.append(fd)
    return {
        "pid": os.getpid(),
        "argv0": sys.argv[0],
        "own_session": os.getsid(0) == os.getpid(),
        "pipes_beyond_stdio": len(pipes),
        "path_env": os.environ.get("WORKHIVE_TEST_MARK", ""),
    }
