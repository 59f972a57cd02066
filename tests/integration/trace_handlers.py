"""Handlers for the tracing tests (``trace_handlers:NAME``), run by ``workhive work`` in its worker processes.

Importing this module configures the OpenTelemetry SDK in the process, as an
application's handler module would: every finished span is written, one JSON
object a line, to ``$TRACE_SPANS_DIR/spans-<pid>.jsonl`` the moment it ends
(a worker process may be ended without running ``atexit``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import workhive
import workhive.tracing


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """What the tests read of a span: ids as hex, name, kind, attributes, status, events."""
    context = span.get_span_context()
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "parent_id": None if span.parent is None else format(span.parent.span_id, "016x"),
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "description": span.status.description,
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "pid": os.getpid(),
    }


class FileExporter(SpanExporter):
    """Appends each span to a JSON-lines file, flushed at once."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Any) -> SpanExportResult:
        with self.path.open("a") as out:
            for span in spans:
                out.write(json.dumps(span_record(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def configure(directory: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(Path(directory) / f"spans-{os.getpid()}.jsonl")))
    trace.set_tracer_provider(provider)


if os.environ.get("TRACE_SPANS_DIR"):
    configure(os.environ["TRACE_SPANS_DIR"])

tracer = trace.get_tracer("trace_handlers")


def handle(ctx: Any) -> dict[str, Any]:
    """Item behaviour by ``kind``: ok, fails once then ok, permanent, rate limited once then ok."""
    # The handler's own span ends before it raises: what the SDK records of an exception in the
    # application's spans is the application's business; workhive's spans are the ones checked.
    with tracer.start_as_current_span("handler work") as span:
        span.set_attribute("item.n", ctx.data["n"])
    # A durable step runs its function inside a "step KEY" span (one key per claim, so none replays).
    ctx.step(f"fetch-{ctx.attempt}-{ctx.item.releases}", lambda: None)
    kind = ctx.data["kind"]
    if kind == "flaky" and ctx.attempt == 1:
        raise RuntimeError(f"first attempt fails (key {os.environ.get('TRACE_TEST_KEY_1', '')})")
    if kind == "permanent":
        raise workhive.Permanent("item can never work")
    if kind == "limited" and ctx.item.releases == 0:
        raise workhive.RateLimited(retry_after=0.001)
    return {"n": ctx.data["n"], "key": getattr(ctx.credential, "name", None)}
