"""One ``workhive work --until-empty`` run, as a user would start it, in a process group of its own.

The fleet runs in its own session, so the nemesis can signal the whole group
(``timeout 60 workhive work`` does) and find the worker processes as the
supervisor's children. stdout and stderr go to files: a run's output is kept
whole for the canary check and for the failure message.

>>> run = FleetRun.start(["--storage", url, "work", "jobs", ...], cwd, env, "run-1")  # doctest: +SKIP
>>> run.wait(timeout=5)                                                                # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs

__all__ = ["FleetRun", "alive", "children_of"]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it waits only to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children_of(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return sorted(found)


@attrs.define(eq=False)
class FleetRun:
    """A running (or finished) fleet: its process, where its output goes, and what ended it."""

    name: str
    proc: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path
    #: what the nemesis did to the whole run ("supervisor SIGKILL", "group SIGTERM", "outage"), if anything
    ended_by: str | None = None
    workers_seen: set[int] = attrs.field(factory=set)
    #: the store's counts when the run started, what its report is checked against
    baseline: Any = None
    #: a worker process of this run was killed, stopped or reaped by the nemesis
    faulted: bool = False

    @classmethod
    def start(cls, args: list[str], cwd: Path, env: dict[str, str], name: str) -> FleetRun:
        out_path, err_path = cwd / f"{name}.out", cwd / f"{name}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "workhive", *args],
                cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        return cls(name, proc, out_path, err_path)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def workers(self) -> list[int]:
        """The worker processes now running (remembered, so a killed supervisor's orphans are found)."""
        found = children_of(self.pid) if self.running() else []
        self.workers_seen.update(found)
        return found

    def orphans(self) -> list[int]:
        """Worker processes of this run still alive (after its supervisor died)."""
        return [pid for pid in sorted(self.workers_seen) if alive(pid)]

    def signal(self, sig: int) -> None:
        if self.running():
            os.kill(self.pid, sig)

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def kill_all(self) -> None:
        """SIGKILL the supervisor and every worker process it ever had (the run is being abandoned)."""
        self.workers()
        self.signal_group(signal.SIGCONT)
        self.signal_group(signal.SIGKILL)
        for pid in self.orphans():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=60)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def report(self) -> dict[str, Any] | None:
        """The ``--json`` report, if the run printed one."""
        text = self.stdout().strip()
        if not text:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def tail(self, chars: int = 1500) -> str:
        """The end of the run's stderr, for a failure message."""
        err = self.stderr()
        return err[-chars:] if err else "(no stderr)"
