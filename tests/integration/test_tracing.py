"""OpenTelemetry traces follow an item from the pushing process into the handler's process (``workhive.tracing``).

The pusher is a process of its own with the SDK's in-memory exporter; the
handlers run in the worker processes of a real ``workhive work`` fleet, whose
handler module (``trace_handlers``) exports every span to a file as it ends.
A fleet run without opentelemetry imported anywhere never imports it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from .cli_helpers import COMMAND
from .conftest import HERE, fleet_env

pytest.importorskip("workhive_sqlite")
pytest.importorskip("workhive_env_credentials")
pytest.importorskip("opentelemetry.sdk", reason="the tracing tests need opentelemetry-sdk (tox's all-py3XX envs)")

SECRET = "sk-trace-test-0123456789abcdef"
TIMEOUT = 240  # generous: the machine is shared; nothing here measures time

PUSHER = """
import asyncio, json, os, sys
sys.path.insert(0, {here!r})
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import workhive
from trace_handlers import span_record

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

KINDS = ["ok", "ok", "flaky", "permanent", "limited"]

async def main():
    ids = {{}}
    async with workhive.open({url!r}) as hive:
        with trace.get_tracer("pusher").start_as_current_span("request"):
            keyed = await hive.pool("keyed").push_many([{{"n": n, "kind": k}} for n, k in enumerate(KINDS)])
            single = await hive.pool("keyed").push({{"n": 9, "kind": "flaky"}})
            plain = await hive.pool("plain").push_many(
                [{{"n": n, "kind": k}} for n, k in enumerate(["ok", "flaky", "ok"])]
            )
    ids["keyed"] = keyed + [single]
    ids["plain"] = plain
    spans = [span_record(s) for s in exporter.get_finished_spans()]
    print(json.dumps({{"pid": os.getpid(), "ids": ids, "spans": spans}}))

asyncio.run(main())
"""


def run_fleet(tmp_path: Path, url: str, pool: str, *extra: str, **env_vars: str) -> dict[str, Any]:
    spans = tmp_path / "spans"
    spans.mkdir(exist_ok=True)
    env = fleet_env(TRACE_SPANS_DIR=str(spans), **env_vars)
    env = {k: v for k, v in env.items() if k != "WORKHIVE_STORAGE"}
    done = subprocess.run(
        [*COMMAND, "--storage", url, "work", pool, "--handler", "trace_handlers:handle", "--processes", "2",
         "--concurrency", "2", "--backoff", "none", "--until-empty", "--progress", "none", "--json", *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def exported(tmp_path: Path) -> tuple[list[dict[str, Any]], str]:
    text = "".join(p.read_text() for p in sorted((tmp_path / "spans").glob("spans-*.jsonl")))
    return [json.loads(line) for line in text.splitlines()], text


def test_traces_continue_from_the_pushing_process_into_the_handlers_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hive.db'}"
    pusher = tmp_path / "pusher.py"
    pusher.write_text(textwrap.dedent(PUSHER.format(here=str(HERE), url=url)))
    pushed = subprocess.run(
        [sys.executable, str(pusher)], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, env=fleet_env()
    )
    assert pushed.returncode == 0, pushed.stderr
    sent = json.loads(pushed.stdout)
    request = next(s for s in sent["spans"] if s["name"] == "request")
    pushes = {s["span_id"]: s for s in sent["spans"] if s["name"].startswith("push ")}
    assert len(pushes) == 3 and all(s["trace_id"] == request["trace_id"] for s in pushes.values())
    assert all(s["parent_id"] == request["span_id"] and s["kind"] == "PRODUCER" for s in pushes.values())
    single = next(s for s in pushes.values() if s["attributes"].get("workhive.item.id") == sent["ids"]["keyed"][-1])

    # Keys with a rate budget: sync handlers run one at a time on the loop's path, with budget waits.
    # (A key's secret is scrubbed from what workhive records wherever the process holds it as a key.)
    keyed = run_fleet(tmp_path, url, "keyed", "--credentials", "env:TRACE_TEST_KEY?rpm=120", TRACE_TEST_KEY_1=SECRET)
    # No keys: sync handlers run several items per trip to the thread pool.
    plain = run_fleet(tmp_path, url, "plain")
    assert (keyed["done"], keyed["poisoned"], plain["done"]) == (5, 1, 3), (keyed, plain)

    spans, text = exported(tmp_path)
    assert SECRET not in text, "a key's secret reached a span"
    assert all(s["trace_id"] == request["trace_id"] for s in spans), "a span of the fleet left the pusher's trace"
    assert {s["pid"] for s in spans}.isdisjoint({sent["pid"]}) and len({s["pid"] for s in spans}) >= 1
    handles = [s for s in spans if s["name"].startswith("handle ")]
    claims = [s for s in spans if s["name"].startswith("claim ")]
    by_item: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in handles:
        assert span["kind"] == "CONSUMER"
        assert span["parent_id"] in pushes, "a handle span is not a child of its item's push"
        by_item[span["attributes"]["workhive.item.id"]].append(span)
    every_id = sent["ids"]["keyed"] + sent["ids"]["plain"]
    assert sorted(by_item) == sorted(every_id)
    # The single push is the parent of its own item's spans; the batch's items share the batch's push.
    assert {s["parent_id"] for s in by_item[sent["ids"]["keyed"][-1]]} == {single["span_id"]}

    def outcomes(item_id: str) -> list[tuple[int, str]]:
        # (A claim handed back before its call, when no key freed up in time, is "not_run": not counted here.)
        runs = [s for s in by_item[item_id] if s["attributes"]["workhive.outcome"] != "not_run"]
        return sorted((s["attributes"]["workhive.attempt"], s["attributes"]["workhive.outcome"]) for s in runs)

    ok1, ok2, flaky, permanent, limited, single_flaky = sent["ids"]["keyed"]
    assert outcomes(ok1) == outcomes(ok2) == [(1, "ok")]
    assert outcomes(flaky) == outcomes(single_flaky) == [(1, "failed"), (2, "ok")]
    assert outcomes(permanent) == [(1, "permanent")]
    assert outcomes(limited) == [(1, "ok"), (1, "rate_limited")]  # a 429 hands the item back unspent
    plain_ok, plain_flaky, _ = sent["ids"]["plain"]
    assert outcomes(plain_ok) == [(1, "ok")] and outcomes(plain_flaky) == [(1, "failed"), (2, "ok")]

    failed = next(s for s in by_item[flaky] if s["attributes"]["workhive.outcome"] == "failed")
    assert failed["status"] == "ERROR" and "first attempt fails" in failed["description"]
    assert failed["events"][0]["attributes"]["exception.type"] == "RuntimeError"
    for item_id in sent["ids"]["keyed"]:
        assert {s["attributes"]["workhive.credential"] for s in by_item[item_id]} == {"TRACE_TEST_KEY_1"}
    for item_id in sent["ids"]["plain"]:
        assert all("workhive.credential" not in s["attributes"] for s in by_item[item_id])

    # Each run of a handler was claimed first: a claim span per (item, attempt), child of the same push.
    claimed = {(s["attributes"]["workhive.item.id"], s["attributes"]["workhive.attempt"]) for s in claims}
    assert claimed == {(s["attributes"]["workhive.item.id"], s["attributes"]["workhive.attempt"]) for s in handles}
    assert all(s["parent_id"] in pushes for s in claims)

    # The handler ran inside its span: the handler's own span is its child, in its process.
    handle_ids = {s["span_id"]: s for s in handles}
    work = [s for s in spans if s["name"] == "handler work"]
    assert len(work) == len(handles)
    for span in work:
        parent = handle_ids[span["parent_id"]]
        assert parent["pid"] == span["pid"] and parent["attributes"]["workhive.item.id"] in every_id

    # Each durable step (ctx.step) makes a span inside the handle span, in the handler's process.
    steps = [s for s in spans if s["name"].startswith("step fetch-")]
    assert len(steps) == len([s for s in handles if s["attributes"]["workhive.outcome"] != "not_run"])
    assert all(handle_ids[s["parent_id"]]["pid"] == s["pid"] for s in steps)
    assert all(s["attributes"]["workhive.step"] == s["name"][len("step ") :] for s in steps)

    # Every wait for the key's budget the fleet reported is a span inside the item's handle span.
    waits = [s for s in spans if s["name"] == "budget wait"]
    assert len(waits) == keyed.get("budget_waits", 0)
    assert all(handle_ids[s["parent_id"]]["attributes"]["workhive.credential"] == "TRACE_TEST_KEY_1" for s in waits)


NO_OTEL_TASK = """
import sys

def handle(ctx):
    return {"otel": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")}
"""

NO_OTEL_FLEET = """
import asyncio, json, sys
import workhive
from workhive.runtime import FleetOptions, run_fleet

async def push():
    async with workhive.open({url!r}) as hive:
        await hive.pool("jobs").push_many([{{"n": n}} for n in range(4)])
        await hive.pool("jobs").push({{"n": 4}})

asyncio.run(push())
report = run_fleet(FleetOptions(pool="jobs", handler="no_otel_task:handle", storage={url!r}, processes=2,
                                until_empty=True, progress="none"))
async def results():
    async with workhive.open({url!r}) as hive:
        return [i.result for i in await hive.pool("jobs").items("done")]

print(json.dumps({{"done": report.done, "results": asyncio.run(results()),
                  "here": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")}}))
"""


def test_a_fleet_without_opentelemetry_in_use_never_imports_it(tmp_path: Path) -> None:
    """Installed (this env has it) but imported by nobody: workhive pushes, claims and handles without it."""
    (tmp_path / "no_otel_task.py").write_text(textwrap.dedent(NO_OTEL_TASK))
    script = tmp_path / "fleet.py"
    script.write_text(textwrap.dedent(NO_OTEL_FLEET.format(url=f"sqlite:///{tmp_path / 'hive.db'}")))
    env = fleet_env()
    env["PYTHONPATH"] = str(tmp_path) + ":" + env["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, env=env
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["done"] == 5 and len(seen["results"]) == 5
    assert seen["here"] == [], "the pushing and supervising process imported opentelemetry"
    assert all(r["otel"] == [] for r in seen["results"]), "a worker process imported opentelemetry"


API_ONLY = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
import workhive

# No SDK: the application only passes traces through (a context it received, here made by hand).
received = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))

async def main():
    async with workhive.open("memory://") as hive:
        pool = hive.pool("jobs")
        alone = await pool.get(await pool.push({"n": 1}))
        with trace.use_span(NonRecordingSpan(received)):
            passed = await pool.get(await pool.push({"n": 2}))
        return {"alone": alone.payload, "passed": passed.payload, "data": passed.data}

print(json.dumps(asyncio.run(main())))
"""


def test_without_a_configured_provider_nothing_is_recorded_and_a_received_trace_is_passed_on(tmp_path: Path) -> None:
    script = tmp_path / "api_only.py"
    script.write_text(textwrap.dedent(API_ONLY))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, env=fleet_env()
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["alone"] == '{"n":1}', "an item pushed outside any trace is stored as it always was"
    carried = '{"$workhive":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-'
    assert seen["passed"].startswith(carried), "the received context goes on with the item, unchanged"
    assert seen["data"] == {"n": 2}
