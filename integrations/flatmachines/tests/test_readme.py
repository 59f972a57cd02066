"""The README's snippets are the tested path: each one runs here as written, in a process of its own.

A snippet is the fenced block after a ``<!-- readme-test: NAME -->`` line.
Each runs in a fresh directory (where ``data/`` exists, as the snippets
assume) with ``WORKHIVE_STORAGE=sqlite:///data/hive.db``, followed by a few
lines that use what it built and print the outcome as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fmversion import NAMED_HOOKS, only_1x, only_4x

import workhive

README = Path(__file__).parent.parent / "README.md"
STORAGE = "sqlite:///data/hive.db"


def snippets() -> dict[str, str]:
    found = re.findall(r"<!-- readme-test: (\S+) -->\n```\w*\n(.*?)```", README.read_text(), re.S)
    return dict(found)


def run(tmp_path: Path, *parts: str) -> dict[str, Any]:
    """Run the parts as one program in tmp_path; its last stdout line that is JSON."""
    (tmp_path / "data").mkdir(exist_ok=True)
    script = tmp_path / "program.py"
    script.write_text("\n\n".join(textwrap.dedent(p) for p in parts))
    env = {**os.environ, "WORKHIVE_STORAGE": STORAGE, "WORKHIVE_LOCKS": "fcntl:///data/locks"}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


async def items(tmp_path: Path, pool: str) -> list[workhive.WorkItem]:
    async with workhive.open(f"sqlite:///{tmp_path / 'data' / 'hive.db'}") as hive:
        found = []
        for state in workhive.ItemState:
            found += await hive.pool(pool).items(state)
        return found


def write_machine(tmp_path: Path) -> None:
    yaml = snippets()["job_worker.yml"]
    if not NAMED_HOOKS:  # 1.x: the one line of data.hooks the README gives for it
        yaml = yaml.replace("data:\n", "data:\n" + snippets()["fm1-yaml"], 1)
    (tmp_path / "job_worker.yml").write_text(yaml)


RUN_MACHINE = """
import asyncio, json
out = asyncio.run(machine.execute(input={"pool_id": "jobs", "worker_id": "w1"}))
print(json.dumps(out))
"""


def test_every_marked_snippet_is_found() -> None:
    names = set(snippets())
    expected = {"job_worker.yml", "fm4-registry", "custom-hooks", "fm1-yaml", "seed", "checkpoints", "lease"}
    assert names == expected


def test_the_seed_script_pushes_to_the_hive(tmp_path: Path) -> None:
    run(tmp_path, snippets()["seed"])
    assert sorted(i.data["n"] for i in asyncio.run(items(tmp_path, "jobs"))) == [0, 1, 2]


@only_4x
def test_the_registry_line_runs_the_job_worker_on_the_hive(tmp_path: Path) -> None:
    run(tmp_path, snippets()["seed"])
    write_machine(tmp_path)
    out = run(tmp_path, snippets()["fm4-registry"], RUN_MACHINE)
    done = [i for i in asyncio.run(items(tmp_path, "jobs")) if i.state is workhive.ItemState.DONE]
    assert [i.id for i in done] == [out["job_id"]] and done[0].claimed_by == "w1"


@only_4x
def test_a_custom_hooks_class_with_the_backends_line_runs_the_job_worker(tmp_path: Path) -> None:
    run(tmp_path, snippets()["seed"])
    write_machine(tmp_path)
    program = """
    from flatmachines import HooksRegistry
    registry = HooksRegistry()
    registry.register("distributed-worker", DemoHooks)
    machine = FlatMachine(config_file="job_worker.yml", hooks_registry=registry)
    """
    out = run(tmp_path, snippets()["custom-hooks"], "from flatmachines import FlatMachine", program, RUN_MACHINE)
    done = [i for i in asyncio.run(items(tmp_path, "jobs")) if i.state is workhive.ItemState.DONE]
    assert [i.id for i in done] == [out["job_id"]]


@only_1x
def test_the_yaml_line_runs_the_job_worker_on_the_hive(tmp_path: Path) -> None:
    run(tmp_path, snippets()["seed"])
    write_machine(tmp_path)
    program = """
    from flatmachines import FlatMachine
    machine = FlatMachine(config_file="job_worker.yml")
    """
    out = run(tmp_path, program, RUN_MACHINE)
    done = [i for i in asyncio.run(items(tmp_path, "jobs")) if i.state is workhive.ItemState.DONE]
    assert [i.id for i in done] == [out["job_id"]] and done[0].claimed_by == "w1"


def test_the_checkpoints_line_gives_the_machine_hive_persistence_and_lock(tmp_path: Path) -> None:
    write_machine(tmp_path)
    check = """
    import asyncio, json
    from workhive_flatmachines import WorkhiveExecutionLock, WorkhivePersistence

    async def check():
        assert isinstance(machine.persistence, WorkhivePersistence)
        assert isinstance(machine.lock, WorkhiveExecutionLock)
        assert machine.persistence.handle is machine.lock.handle
        assert await machine.lock.acquire("e1")
        await machine.persistence.save("e1/latest", b"e1/step_000001_execute.json")
        await machine.lock.release("e1")
        return await machine.persistence.list_execution_ids()

    print(json.dumps({"executions": asyncio.run(check())}))
    """
    assert run(tmp_path, snippets()["checkpoints"], check) == {"executions": ["e1"]}


def test_the_lease_ways_out_run(tmp_path: Path) -> None:
    use = """
    import asyncio, json

    async def job():
        await hooks._work.pool("render").push({"a": 1, "b": 2})
        ctx = await hooks.on_action("claim_job", {"pool_id": "render", "worker_id": "w1"})
        held = await (await hooks.handle.hive()).pool("render").get(ctx["job_id"])
        ctx = await hooks.on_action("render", ctx)
        await hooks.on_action("complete_job", ctx)
        return {"result": ctx["result"], "lease": held.lease_seconds}

    print(json.dumps(asyncio.run(job())))
    """
    assert run(tmp_path, snippets()["lease"], use) == {"result": {"pages": 2}, "lease": 3600}
    (item,) = asyncio.run(items(tmp_path, "render"))
    assert (item.state, item.result) == (workhive.ItemState.DONE, {"pages": 2})


def test_the_readme_names_no_version_it_does_not_test() -> None:
    text = README.read_text()
    assert "4.2.1" in text and "1.0.0" in text
    assert "FIGURES" not in text, "the bench lines were not pasted in"


@pytest.mark.parametrize("name", ["fm4-registry", "custom-hooks", "seed", "checkpoints", "lease"])
def test_python_snippets_compile(name: str) -> None:
    compile(snippets()[name], f"README:{name}", "exec")
