"""Hive time on one machine: a per-boot anchor stored in the database plus the monotonic clock.

Leases, delays and heartbeats compare times written by different processes, so
every process must read the same clock, and that clock must never step. The
wall clock (``time.time``) can be stepped by NTP or an administrator, and two
processes may even disagree about it. ``CLOCK_MONOTONIC`` never steps and, on
Linux, is one clock for the whole machine, but it starts near zero at boot. So:

* hive time = ``offset + machine_clock()``, with ``offset`` stored in the
  database (table ``clock``) together with the id of the boot it belongs to
  (``/proc/sys/kernel/random/boot_id``); the monotonic clock is
  ``CLOCK_BOOTTIME`` where there is one (it also counts time suspended);
* the first process to open the file after a boot sets ``offset`` from its
  wall clock, but never lower than the latest time the file has seen, so hive
  time never runs backward across a reboot; every later process of that boot
  adopts the stored ``offset`` whatever its own wall clock says.

>>> clock = HiveClock(TimeSources(wall=lambda: 1000.0, monotonic=lambda: 10.0, boot_id=lambda: "b"))
>>> clock()  # before the anchor is read: this process's wall clock
1000.0
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from workhive_sqlite.sqlfiles import queries

__all__ = ["BOOT_ID_FILE", "HiveClock", "TimeSources", "machine_clock", "read_boot_id"]

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


def _since_boot() -> float:
    """Seconds since boot: ``CLOCK_BOOTTIME`` where there is one (it counts a suspend, which
    ``CLOCK_MONOTONIC`` skips, so hive time keeps pace with the wall clock), else the monotonic clock."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


#: Machine-wide, never stepped; restarts at boot.
machine_clock: Callable[[], float] = _since_boot if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic


def read_boot_id() -> str:
    """This boot's id; where the kernel gives none, the boot time estimated to the minute.

    The estimate (wall clock minus monotonic clock) moves when the wall clock is
    stepped by a minute or more, which then counts as a new boot: hive time
    still never runs backward, but processes started before and after such a
    step disagree by the step. Linux always has the file.
    """
    try:
        return BOOT_ID_FILE.read_text().strip()
    except OSError:
        return f"estimated-boot-minute:{round((time.time() - time.monotonic()) / 60)}"


@attrs.frozen
class TimeSources:
    """The clocks hive time is built from (tests inject a wall clock that steps)."""

    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = machine_clock
    boot_id: Callable[[], str] = read_boot_id


_Q = queries()


class HiveClock:
    """Callable hive time: ``anchor`` (under the write lock) reads or sets this boot's offset."""

    def __init__(self, sources: TimeSources | None = None) -> None:
        self.sources = sources if sources is not None else TimeSources()
        self._monotonic = self.sources.monotonic
        # Until anchored, this process's own wall clock (so now() works before open).
        self.offset = self.sources.wall() - self._monotonic()
        self.anchored = False

    def __call__(self) -> float:
        return self.offset + self._monotonic()

    def anchor(self, conn: sqlite3.Connection) -> None:
        """Adopt this boot's stored offset, or store a new one; run inside a write transaction."""
        execute = conn.execute
        boot = self.sources.boot_id()
        row = execute(_Q["clock_anchor"]).fetchone()
        if row is not None and row[0] == boot:
            self.offset = float(row[1])
            self.anchored = True
            return
        latest = float(execute(_Q["clock_latest"]).fetchone()[0])
        mono = self._monotonic()
        offset = max(self.sources.wall(), latest) - mono
        execute(_Q["clock_set_anchor"], (boot, offset, offset + mono))
        self.offset = offset
        self.anchored = True

    def record(self, conn: sqlite3.Connection) -> None:
        """Store the current time as seen, the floor for the next boot's anchor; run in a write transaction."""
        if not self.anchored:
            return  # nothing to record into (the store was refused before it was anchored)
        conn.execute(_Q["clock_seen"], (self(),))
