"""The handlers bench/agents.py runs (imported by its worker processes as ``agent_handlers:...``).

Each makes five sequential calls to the bench's fake API (``$BENCH_AGENTS_API``),
each carrying the item, the step, the claim's fencing token and
``ctx.step_key`` as its ``Idempotency-Key``. Not a bench itself.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

API_ENV = "BENCH_AGENTS_API"
STEPS = 5


def _call(ctx: Any, step: int) -> dict[str, Any]:
    body = json.dumps({"item": ctx.item_id, "step": step, "token": ctx.item.token}).encode()
    request = urllib.request.Request(
        os.environ[API_ENV] + "/v1/agent-step",
        data=body,
        headers={"Content-Type": "application/json", "Idempotency-Key": ctx.step_key(f"s{step}")},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def with_steps(ctx: Any) -> dict[str, Any]:
    """Five calls, each a durable step: a later claim replays those that finished."""
    answers = [ctx.step(f"s{step}", _call, ctx, step) for step in range(STEPS)]
    return {"words": sum(a["words"] for a in answers)}


def plain(ctx: Any) -> dict[str, Any]:
    """The same five calls without steps: a later claim makes them all again."""
    answers = [_call(ctx, step) for step in range(STEPS)]
    return {"words": sum(a["words"] for a in answers)}
