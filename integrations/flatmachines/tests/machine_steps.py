"""A five-step flatmachines machine checkpointing on a hive, run as its own process by test_checkpoints.

    python machine_steps.py URL LOCKS LOG start            # prints the execution id, runs
    python machine_steps.py URL LOCKS LOG resume EXEC_ID   # resumes it from its checkpoint, once its lock is free
    python machine_steps.py URL LOCKS LOG try EXEC_ID      # tries to resume it once

Each step appends its name to LOG (a line, flushed and fsynced) once its work
is done. With ``BLOCK_AT=<n>`` in the environment, step n first prints
``{"blocked": n}`` and waits on stdin forever, before doing anything: the
test kills the process there. Prints the machine's output as JSON at the end,
or ``{"refused": ...}`` when the execution's lock is held elsewhere (``try``).
``resume`` retries until the lock is free, for up to two minutes: a dead
holder's lock frees at once on fcntl and PostgreSQL, and within its liveness
window (10 s by default) on Redis.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from flatmachines import FlatMachine, MachineHooks

from workhive_flatmachines import hive_checkpoints

STEPS = 5


def config() -> dict[str, Any]:
    states: dict[str, Any] = {"start": {"type": "initial", "transitions": [{"to": "s1"}]}}
    for n in range(1, STEPS + 1):
        states[f"s{n}"] = {"action": f"step_{n}", "transitions": [{"to": f"s{n + 1}" if n < STEPS else "done"}]}
    states["done"] = {"type": "final", "output": {"finished": True, "steps": "{{ context.steps }}"}}
    return {
        "spec": "flatmachine",
        "spec_version": "1.0.0",
        "data": {"name": "steps", "context": {"steps": 0}, "states": states},
    }


class StepHooks(MachineHooks):
    def __init__(self, log: str) -> None:
        self.log = log

    def _record(self, n: int) -> None:
        with open(self.log, "a") as log:
            log.write(f"step {n}\n")
            log.flush()
            os.fsync(log.fileno())

    async def on_action(self, *args: Any) -> dict[str, Any]:
        action, context = args[-2], args[-1]  # (action, context) on 1.x, (state, action, context) on 4.x
        n = int(action.rsplit("_", 1)[1])
        if os.environ.get("BLOCK_AT") == str(n):
            print(json.dumps({"blocked": n}), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await asyncio.get_running_loop().run_in_executor(None, self._record, n)
        context["steps"] = context.get("steps", 0) + 1
        return context


async def main(url: str, locks: str, log: str, mode: str, execution_id: str | None) -> None:
    options = {"locks": locks} if locks != "-" else {}
    kwargs: dict[str, Any] = {"_execution_id": execution_id} if execution_id else {}
    machine = FlatMachine(config_dict=config(), hooks=StepHooks(log), **hive_checkpoints(url, **options), **kwargs)
    if mode == "start":
        print(json.dumps({"execution_id": machine.execution_id}), flush=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            out = await machine.execute(input={}, resume_from=execution_id if mode != "start" else None)
        except RuntimeError as exc:  # flatmachines: "Could not acquire lock for execution …"
            if mode == "resume" and "lock" in str(exc) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                continue
            print(json.dumps({"refused": str(exc)}), flush=True)
            return
        break
    print(json.dumps({"output": out}), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], args[3], args[4] if len(args) > 4 else None))
