"""The fleet runtime behind ``workhive work``.

>>> from workhive.runtime import FleetOptions, run_fleet
>>> report = run_fleet(FleetOptions(pool="jobs", handler="myjobs:handle", until_empty=True))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workhive.lazy import lazy_attributes
from workhive.runtime.context import HandlerContext
from workhive.runtime.handler import Handler, load_handler
from workhive.runtime.health import HealthPolicy
from workhive.runtime.options import ExitCode, FleetOptions, FleetReport

if TYPE_CHECKING:
    from workhive.runtime.fleet import check_options, run_fleet
    from workhive.runtime.progress import FleetProgress, format_line, renderer_for

__all__ = [
    "ExitCode",
    "FleetOptions",
    "FleetProgress",
    "FleetReport",
    "Handler",
    "HandlerContext",
    "HealthPolicy",
    "check_options",
    "format_line",
    "load_handler",
    "renderer_for",
    "run_fleet",
]

#: Names imported on first use. A worker process is ``python -m workhive.runtime``, which
#: imports this package first: it never runs a fleet, and the supervisor, the fleet and the
#: progress display were a good part of its start-up (imported, and their classes built).
_LAZY = {
    "check_options": "workhive.runtime.fleet",
    "run_fleet": "workhive.runtime.fleet",
    "FleetProgress": "workhive.runtime.progress",
    "format_line": "workhive.runtime.progress",
    "renderer_for": "workhive.runtime.progress",
}

__getattr__ = lazy_attributes(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
