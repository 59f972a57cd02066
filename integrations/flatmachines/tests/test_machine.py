"""A flatmachines machine selects the adapter from its YAML.

`data.hooks` module/class on flatmachines 1.x, `hooks: workhive` on each state on 4.x.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from flatmachines import FlatMachine
from fmversion import NAMED_HOOKS, only_1x, with_state_hooks

import workhive
from workhive_flatmachines import register_hooks

MACHINE = """
spec: flatmachine
spec_version: "1.0.0"
data:
  name: job_worker
  context:
    pool_id: "{{{{ input.pool_id }}}}"
    worker_id: "{{{{ input.worker_id }}}}"
{hooks}
  states:
    start:
      type: initial
      transitions:
        - to: register_worker
    register_worker:
      action: register_worker
      transitions:
        - to: claim_job
    claim_job:
      action: claim_job
      transitions:
        - condition: "context.job == None"
          to: no_work
        - to: complete_job
    complete_job:
      action: complete_job
      transitions:
        - to: deregister
    deregister:
      action: deregister_worker
      transitions:
        - to: done
    no_work:
      action: deregister_worker
      transitions:
        - to: no_work_final
    no_work_final:
      type: final
      output:
        status: "no_work_available"
    done:
      type: final
      output:
        job_id: "{{{{ context.job_id }}}}"
        worker_id: "{{{{ context.worker_id }}}}"
"""


HOOKS_1X = """  hooks:
    module: workhive_flatmachines
    class: WorkhiveWorkerHooks
    args:
      storage: "{url}"
      lease: 120"""
HOOKS_4X = 'hooks: {{name: workhive, args: {{storage: "{url}", lease: 120}}}}'


def write_machine(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "job_worker.yml"
    text = MACHINE.format(url=url, hooks="" if NAMED_HOOKS else HOOKS_1X.format(url=url))
    path.write_text(with_state_hooks(text, HOOKS_4X.format(url=url) if NAMED_HOOKS else ""))
    return path


def build(path: Path) -> FlatMachine:
    if NAMED_HOOKS:
        from flatmachines import HooksRegistry

        return FlatMachine(config_file=str(path), hooks_registry=register_hooks(HooksRegistry()))
    return FlatMachine(config_file=str(path))


def hooks_of(machine: FlatMachine) -> object:
    return machine._get_state_hooks("claim_job") if NAMED_HOOKS else machine._hooks  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_the_yaml_selects_the_hooks_and_a_job_runs_through_them(tmp_path: Path) -> None:
    url = f"memory://machine-{uuid.uuid4().hex}"
    async with workhive.open(url) as hive:
        pushed = await hive.pool("jobs").push({"doc": 1})
        machine = build(write_machine(tmp_path, url))
        assert type(hooks_of(machine)).__name__ == "WorkhiveWorkerHooks"
        out = await machine.execute(input={"pool_id": "jobs", "worker_id": "w1"})
        assert out["job_id"] == pushed
        item = await hive.pool("jobs").get(pushed)
        assert (item.state, item.claimed_by) == (workhive.ItemState.DONE, "w1")
        assert (await hive.workers.get("w1")).status is workhive.WorkerStatus.STOPPED
        again = await build(write_machine(tmp_path, url)).execute(input={"pool_id": "jobs", "worker_id": "w2"})
        assert again == {"status": "no_work_available"}


@only_1x  # flatmachines 4.x's runner builds machines without a HooksRegistry: named hooks cannot resolve there
def test_flatmachines_run_finishes_a_job_and_its_process_exits(tmp_path: Path) -> None:
    """``python -m flatmachines.run`` never closes its hooks: the process must still end, with the job done."""
    url = f"sqlite:///{tmp_path / 'hive.db'}"

    async def seed() -> str:
        async with workhive.open(url) as hive:
            return await hive.pool("jobs").push({"doc": 1})

    pushed = asyncio.run(seed())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "flatmachines.run",
            "--config",
            str(write_machine(tmp_path, url)),
            "--input",
            json.dumps({"pool_id": "jobs", "worker_id": "w1"}),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # flatmachines logs to stdout too; its result is the indented JSON document.
    lines = done.stdout.splitlines()
    document = "\n".join(lines[lines.index("{") : lines.index("}") + 1])
    assert json.loads(document)["job_id"] == pushed

    async def state() -> workhive.ItemState:
        async with workhive.open(url) as hive:
            return (await hive.pool("jobs").get(pushed)).state

    assert asyncio.run(state()) is workhive.ItemState.DONE
