"""The fleet runtime behind ``workhive work``.

>>> from workhive.runtime import FleetOptions, run_fleet
>>> report = run_fleet(FleetOptions(pool="jobs", handler="myjobs:handle", until_empty=True))  # doctest: +SKIP
"""

from workhive.runtime.context import HandlerContext
from workhive.runtime.fleet import check_options, run_fleet
from workhive.runtime.handler import Handler, load_handler
from workhive.runtime.health import HealthPolicy
from workhive.runtime.options import ExitCode, FleetOptions, FleetReport
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
