"""OpenTelemetry spans that follow an item from ``push`` to its handler, across processes.

With ``opentelemetry-api`` installed (``pip install 'workhive[otel]'``) and a
tracer provider configured by the application (the SDK, or
``opentelemetry-instrument``), workhive makes these spans (tracer
``workhive``):

========================  ========  ==================================================================
span                      kind      when, and its parent
========================  ========  ==================================================================
``push POOL``             PRODUCER  ``Pool.push``/``push_many``; child of the caller's current span
``claim POOL``            CONSUMER  an item was claimed (``Pool.claim*``); child of its push
``handle POOL``           CONSUMER  the worker runs the item's handler; child of its push; the handler
                                    runs inside it, so the handler's own spans are its children
``budget wait``           INTERNAL  the worker waits for a key's rate budget before the call
``step KEY``              INTERNAL  one durable step of a handler (``step``: the hook for ``ctx.step``)
========================  ========  ==================================================================

Attributes: ``workhive.pool``, ``workhive.item.id``, ``workhive.attempt``,
``workhive.worker.id``, ``workhive.credential`` (the key's *name*, never its
secret), ``workhive.outcome`` (``ok``, ``failed``, ``permanent``,
``rate_limited``, ``auth_failed``, ``ended_process``, ``not_run``), and the
messaging conventions' ``messaging.system``/``messaging.destination.name``/
``messaging.message.id``.

The push records the W3C trace context (through the configured propagator,
``opentelemetry.propagate.inject``) in the item's payload envelope
(``workhive.envelope``), so it reaches every engine without a schema change.
The handler's span is a *child* of the push (not a link): each claim runs one
item, caused by that push and nothing else, so one trace shows the push and
every attempt of the item side by side; ``push_many`` puts one context on all
its items, and each item's spans are children of that one push.

Workhive never imports opentelemetry itself: it traces only once the
application has imported it (it must, to configure a provider), and until then
each hook costs one dictionary lookup.

>>> import opentelemetry.trace  # doctest: +SKIP
>>> await hive.pool("jobs").push({"n": 1})   # inside the caller's span: the item carries its context  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from workhive import envelope

if TYPE_CHECKING:
    from workhive.models import WorkItem

__all__ = ["budget_wait", "claimed", "credential", "handling", "headers", "outcome", "outcome_of", "pushing", "step"]

TRACER_NAME = "workhive"

# Set by ``handling`` to the span of the item being handled in this context, for ``outcome``/``credential``.
_HANDLING: contextvars.ContextVar[Any] = contextvars.ContextVar("workhive_handling", default=None)

_api: Any = None  # (trace, propagate, tracer) once opentelemetry was seen imported


def _otel() -> Any:
    """opentelemetry's trace and propagate modules and workhive's tracer, or None if the app never imported it."""
    global _api
    if _api is not None:
        return _api
    if "opentelemetry.trace" not in sys.modules:
        return None
    try:
        from opentelemetry import propagate, trace
    except ImportError:  # a broken or partial installation: no tracing, rather than no work
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours: str | None = version("workhive")
    except PackageNotFoundError:
        ours = None
    # The proxy tracer follows a provider set later (the SDK configured after the first push).
    _api = (trace, propagate, trace.get_tracer(TRACER_NAME, ours))
    return _api


def _recording(trace: Any) -> bool:
    """Whether a tracer provider was configured: without one every span is a no-op, so none is started.

    (The caller's context is still carried by ``headers`` and continued by ``handling``, for
    services that only pass a trace through.)
    """
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _base(pool: str) -> dict[str, Any]:
    return {"messaging.system": "workhive", "messaging.destination.name": pool, "workhive.pool": pool}


def _item_attributes(pool: str, item: WorkItem, worker_id: str | None) -> dict[str, Any]:
    attributes = _base(pool)
    attributes.update(
        {
            "messaging.message.id": item.id,
            "workhive.item.id": item.id,
            "workhive.attempt": item.attempts,
        }
    )
    if worker_id is not None:
        attributes["workhive.worker.id"] = worker_id
    return attributes


def headers() -> dict[str, str] | None:
    """The current trace context as a propagator's carrier, for an item being pushed (None: nothing to carry)."""
    api = _otel()
    if api is None:
        return None
    trace, propagate, _ = api
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return None
    from workhive.redaction import scrub

    # Baggage travels too if the application's propagators carry it: never a secret this process holds.
    return {k: scrub(v) for k, v in carrier.items()}


class _Push:
    """The span of one push; ``pushed(ids)`` names the items it stored."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def pushed(self, ids: Sequence[str]) -> None:
        if self.span is not None and ids:
            self.span.set_attribute("messaging.batch.message_count", len(ids))
            if len(ids) == 1:
                self.span.set_attribute("workhive.item.id", ids[0])
                self.span.set_attribute("messaging.message.id", ids[0])


_NO_PUSH = _Push(None)
# What the hooks return while opentelemetry is not in use: reusable, and cheaper than a generator's context.
_NO_PUSH_SPAN = contextlib.nullcontext(_NO_PUSH)
_NOTHING: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def pushing(pool: str) -> contextlib.AbstractContextManager[_Push]:
    """The ``push POOL`` span, current for the block, so ``headers()`` inside it give its context.

    >>> with pushing("jobs") as span:  # doctest: +SKIP
    ...     ids = await backend.push("jobs", items)
    ...     span.pushed(ids)
    """
    api = _otel()
    if api is None or not _recording(api[0]):
        return _NO_PUSH_SPAN
    return _pushing(api, pool)


@contextlib.contextmanager
def _pushing(api: Any, pool: str) -> Iterator[_Push]:
    trace, _, tracer = api
    with tracer.start_as_current_span(
        f"push {pool}", kind=trace.SpanKind.PRODUCER, attributes=_base(pool), record_exception=False
    ) as span:
        yield _Push(span)


def _parent(item: WorkItem) -> Any:
    """The context the item was pushed in (an OTel Context), or None when it carries none."""
    if not item.payload.startswith(envelope.ENVELOPE_PREFIX):
        return None
    api = _otel()
    if api is None:
        return None
    carrier = envelope.headers(item.payload)
    if not carrier:
        return None
    return api[1].extract(carrier)


def claimed(pool: str, items: Sequence[WorkItem], worker_id: str) -> None:
    """A ``claim POOL`` span for each claimed item that carries a trace context, from its claim to now."""
    if not items or "opentelemetry.trace" not in sys.modules:
        return
    api = _otel()
    if api is None or not _recording(api[0]):
        return
    trace, _, tracer = api
    now = time.time_ns()
    for item in items:
        parent = _parent(item)
        if parent is None:
            continue
        # The backend's claim time (its clock: a server's may differ from ours by a little; never after now).
        start = now
        if item.lease_expires_at is not None and item.lease_seconds is not None:
            start = min(now, int((item.lease_expires_at - item.lease_seconds) * 1e9))
        span = tracer.start_span(
            f"claim {pool}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes=_item_attributes(pool, item, worker_id),
            start_time=start,
        )
        span.end(end_time=now)


_FAILING = {"failed", "permanent", "auth_failed", "ended_process"}


def outcome_of(exc: BaseException | None) -> str:
    """What a handler's exception (None: it returned) comes to, as ``workhive.outcome`` says it."""
    if exc is None:
        return "ok"
    from workhive.errors import AuthFailed, Permanent, RateLimited

    if isinstance(exc, RateLimited):
        return "rate_limited"
    if isinstance(exc, AuthFailed):
        return "auth_failed"
    if isinstance(exc, Permanent):
        return "permanent"
    if not isinstance(exc, Exception):
        return "ended_process"
    return "failed"


def _set_outcome(span: Any, value: str, exc: BaseException | None) -> None:
    span.set_attribute("workhive.outcome", value)
    if value in _FAILING:
        from opentelemetry.trace import Status, StatusCode

        from workhive.pool import error_text

        # Scrubbed like every stored error: the message may quote a key (no traceback: it may quote more).
        text = error_text(exc) if exc is not None else value
        span.set_status(Status(StatusCode.ERROR, text))
        if exc is not None:
            span.add_event("exception", {"exception.type": type(exc).__name__, "exception.message": text})


def handling(
    pool: str, item: WorkItem, worker_id: str, *, default: str = "not_run"
) -> contextlib.AbstractContextManager[None]:
    """The ``handle POOL`` span around running one item, current for the block (the handler runs in it).

    Its outcome is what ``outcome()`` set inside the block, else the outcome of
    the exception leaving it, else ``default``.
    """
    api = _otel()
    parent = None if api is None else _parent(item)
    if api is None or (parent is None and not api[0].get_current_span().get_span_context().is_valid):
        # Nothing to continue: no tracing, or an item pushed without a trace in a context without one.
        return _NOTHING
    return _handling(api, parent, pool, item, worker_id, default)


@contextlib.contextmanager
def _handling(api: Any, parent: Any, pool: str, item: WorkItem, worker_id: str, default: str) -> Iterator[None]:
    trace, _, tracer = api
    with tracer.start_as_current_span(
        f"handle {pool}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=_item_attributes(pool, item, worker_id),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        token = _HANDLING.set([span, None])
        try:
            yield
        except BaseException as exc:
            state = _HANDLING.get()
            if state[1] is None:
                _set_outcome(span, outcome_of(exc), exc)
                state[1] = True
            raise
        finally:
            state = _HANDLING.get()
            if state[1] is None:
                _set_outcome(span, default, None)
            _HANDLING.reset(token)


def outcome(exc: BaseException | None) -> None:
    """Record on the item being handled what its handler came to (``exc`` raised, or None: returned)."""
    state = _HANDLING.get()
    if state is None or state[1] is not None:
        return
    _set_outcome(state[0], outcome_of(exc), exc)
    state[1] = True


def credential(used: Any) -> None:
    """Name the credential leased for the item being handled (its ``name`` only: never the secret)."""
    state = _HANDLING.get()
    name = getattr(used, "name", None)
    if state is not None and name is not None:
        state[0].set_attribute("workhive.credential", str(name))


@contextlib.contextmanager
def budget_wait(credential_name: str, seconds: float) -> Iterator[None]:
    """The ``budget wait`` span: a worker sleeping for a key's rate budget before its call."""
    api = _otel()
    if api is None or not api[0].get_current_span().get_span_context().is_valid:
        yield
        return
    with api[2].start_as_current_span(
        "budget wait",
        attributes={"workhive.credential": credential_name, "workhive.budget.wait_seconds": float(seconds)},
    ):
        yield


@contextlib.contextmanager
def step(key: str) -> Iterator[None]:
    """The ``step KEY`` span around one durable step of a handler: the hook for ``ctx.step``.

    ``ctx.step(key, fn)`` wraps running ``fn`` in it (a step answered from the
    journal runs nothing and makes no span). Exceptions pass through, marking
    the span as an error with the scrubbed message.

    >>> with step("fetch"):  # doctest: +SKIP
    ...     result = await fn()
    """
    api = _otel()
    if api is None or not api[0].get_current_span().get_span_context().is_valid:
        yield
        return
    with api[2].start_as_current_span(
        f"step {key}", attributes={"workhive.step": key}, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield
        except BaseException as exc:
            _set_outcome(span, "failed", exc)
            raise
