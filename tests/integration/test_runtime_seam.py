"""The seam between the supervisor (parent) and a worker process (child).

The parent side (``fleet``, ``supervisor``) takes what it shares with the
child from ``workhive.runtime.shared``, never from the child's modules.
"""

from __future__ import annotations

import subprocess
import sys

CHILD_MODULES = ("workhive.runtime.process", "workhive.runtime.worker")


def test_the_parent_side_imports_no_module_of_the_child() -> None:
    # A fresh interpreter: this test process has imported every runtime module already.
    probe = (
        "import sys, workhive.runtime.fleet, workhive.runtime.supervisor, workhive.cli.work_cmd; "
        f"print(','.join(m for m in {CHILD_MODULES!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"the parent side imported {done.stdout.strip()}"


def test_what_parent_and_child_share_lives_in_one_module() -> None:
    from workhive.runtime import process, shared, supervisor

    # The child and the parent use the very same objects, defined in ``shared``.
    for name in ("EXIT_UNHEALTHY", "PATH_AFTER_ENV", "metrics_enabled"):
        assert getattr(supervisor, name) is getattr(shared, name)
        assert getattr(process, name) is getattr(shared, name)
    assert process.options_from_json is shared.options_from_json
    assert supervisor.options_to_json is shared.options_to_json
