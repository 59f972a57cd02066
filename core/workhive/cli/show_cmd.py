"""``workhive show POOL ID``: one item — its data, state, attempts, error, result, claim and times."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click

from workhive.cli.context import CliContext, echo, emit_json, format_age, json_option, pass_cli, require_pool
from workhive.item_progress import read_progress
from workhive.models import StepRecord, WorkItem
from workhive.storage import KeepsSteps

__all__ = ["show_cmd", "item_json"]


def item_json(item: WorkItem, now: float) -> dict[str, Any]:
    """Everything stored about ``item`` as plain data (``show --json``)."""
    return {
        "id": item.id,
        "pool": item.pool,
        "state": item.state.value,
        "data": item.data,
        "attempts": item.attempts,
        "max_attempts": item.max_attempts,
        "releases": item.releases,
        "priority": item.priority,
        "timeout": item.timeout,
        "error": item.error,
        "result": item.result,
        "token": item.token,
        "receipt": item.receipt,
        "claimed_by": item.claimed_by,
        "lease_expires_at": item.lease_expires_at,
        "dedup_key": item.dedup_key,
        "created_at": item.created_at,
        "available_at": item.available_at,
        "finished_at": item.finished_at,
        "age": max(0.0, now - item.created_at),
    }


#: characters of a step's result shown per line (``--json`` shows it whole)
STEP_SHOWN_CHARS = 200


def steps_json(steps: list[StepRecord]) -> list[dict[str, Any]]:
    """An item's durable steps (``ctx.step``) as plain data, in store order."""
    return [
        {"key": s.key, "value": s.value, "failed": s.failed, "token": s.token, "stored_at": s.stored_at} for s in steps
    ]


def _when(stamp: float | None, now: float) -> str:
    if stamp is None:
        return "-"
    iso = datetime.fromtimestamp(stamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    delta = stamp - now
    relative = f"in {format_age(delta)}" if delta > 0.5 else f"{format_age(-delta)} ago"
    return f"{iso} ({relative})"


def _progress_text(progress: dict[str, Any] | None) -> str:
    if not progress:
        return "-"
    done, total, note = progress.get("done") or 0, progress.get("total"), progress.get("note")
    text = f"{done:g}" + (f"/{total:g}" if total is not None else "")
    if total:
        text += f" ({100 * done / total:.0f}%)"
    return text + (f" {note}" if note else "") + f" (claim {progress.get('token')})"


@click.command("show")
@click.argument("pool")
@click.argument("item_id", metavar="ID")
@json_option
@pass_cli
def show_cmd(cli: CliContext, pool: str, item_id: str, as_json: bool) -> None:
    """Show one item of POOL: data, state, attempts, last error, result, claim token and times.

    \b
    Example:
      workhive dead emails            # find a poisoned item's id
      workhive show emails i000000000000002a
    """

    async def fetch() -> dict[str, Any]:
        async with cli.hive(create=False) as hive:
            await require_pool(hive, pool)
            item = await hive.pool(pool).get(item_id)
            shown = item_json(item, await hive.now()) | {"progress": await read_progress(hive, pool, item.id)}
            if isinstance(hive.storage, KeepsSteps):  # a backend without steps shows none (no "steps" key)
                shown["steps"] = steps_json(await hive.pool(pool).steps(item.id))
            return shown

    data = cli.run(fetch)
    if as_json:
        emit_json(data)
        return
    now = data["created_at"] + data["age"]
    lines = [
        ("id", data["id"]),
        ("pool", data["pool"]),
        ("state", data["state"]),
        ("attempts", f"{data['attempts']}/{data['max_attempts']} ({data['releases']} given back unspent)"),
        ("token", f"{data['token']} (receipt {data['receipt']})"),
        ("claimed by", data["claimed_by"] or "-"),
        ("lease ends", _when(data["lease_expires_at"], now)),
        ("created", _when(data["created_at"], now)),
        ("available", _when(data["available_at"], now)),
        ("finished", _when(data["finished_at"], now)),
        ("dedup key", data["dedup_key"] or "-"),
        ("data", json.dumps(data["data"], ensure_ascii=False)),
        ("result", "-" if data["result"] is None else json.dumps(data["result"], ensure_ascii=False)),
        ("error", data["error"] or "-"),
        ("progress", _progress_text(data["progress"])),
    ]
    if "steps" in data:
        lines.append(("steps", str(len(data["steps"])) if data["steps"] else "-"))
    for label, value in lines:
        echo(f"{label + ':':<11} {value}")  # an error's traceback keeps its lines; control characters are escaped
    for step in data.get("steps", ()):
        value = json.dumps(step["value"], ensure_ascii=False)
        if len(value) > STEP_SHOWN_CHARS:
            value = value[: STEP_SHOWN_CHARS - 1] + "…"
        mark = "failed permanently: " if step["failed"] else ""
        echo(f"  {step['key']} (claim {step['token']}, {_when(step['stored_at'], now)}): {mark}{value}", one_line=True)
