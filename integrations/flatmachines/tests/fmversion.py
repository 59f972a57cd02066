"""Which flatmachines this run has (the tox factors install 1.0.0 or 4.2.1), and machine YAML for it."""

from __future__ import annotations

from importlib.metadata import version

import pytest

FLATMACHINES = version("flatmachines")
MAJOR = int(FLATMACHINES.split(".")[0])
#: flatmachines 4.x resolves hooks by name per state (HooksRegistry); 1.x loads module/class from data.hooks
NAMED_HOOKS = MAJOR >= 4

only_1x = pytest.mark.skipif(NAMED_HOOKS, reason=f"flatmachines {FLATMACHINES}: a flatmachines 1.x behaviour")
only_4x = pytest.mark.skipif(not NAMED_HOOKS, reason=f"flatmachines {FLATMACHINES}: a flatmachines 4.x behaviour")


def with_state_hooks(states: str, line: str) -> str:
    """A machine's YAML with ``line`` added to every state (names indented 4 spaces, under ``states:``), for 4.x."""
    if not line:
        return states
    out, inside = [], False
    for row in states.splitlines():
        out.append(row)
        if row.strip() == "states:":
            inside = True
        elif inside and row.startswith("    ") and not row.startswith("     ") and row.rstrip().endswith(":"):
            out.append("      " + line)
    return "\n".join(out) + "\n"
