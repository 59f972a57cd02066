"""A flatmachines job worker for the crash tests, run as its own process.

It registers and claims a job through ``WorkhiveWorkerHooks``, prints the job
id, then waits for a line on stdin before completing the job, and prints
whether the completion was accepted. The tests kill it, or freeze it
(SIGSTOP) and let it go on after its job was reaped and finished elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import sys

from workhive_flatmachines import WorkhiveWorkerHooks


async def main(url: str, worker_id: str) -> None:
    hooks = WorkhiveWorkerHooks(storage=url, lease=600)
    ctx = await hooks.on_action("register_worker", {"pool_id": "jobs", "worker_id": worker_id})
    ctx = await hooks.on_action("claim_job", ctx)
    # What a checkpoint of the machine's context would keep: the job id and the claim's receipt.
    print(json.dumps({"job_id": ctx["job_id"], "workhive_claim": ctx["workhive_claim"]}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    ctx["result"] = {"by": worker_id}
    try:
        await hooks.on_action("complete_job", ctx)
    except Exception as exc:
        print(json.dumps({"refused": type(exc).__name__, "message": str(exc)}), flush=True)
    else:
        print(json.dumps({"completed": True}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
