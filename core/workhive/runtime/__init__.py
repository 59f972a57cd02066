"""The fleet runtime behind ``workhive work``."""

from workhive.runtime.options import ExitCode, FleetOptions, FleetReport

__all__ = ["ExitCode", "FleetOptions", "FleetReport"]
