"""The handlers the benches' ``workhive work`` rows run (imported by worker processes as ``handlers:...``).

``bench/support`` is put first on the worker processes' import path
(``support.fleets``), so these import by module name alone. Not a bench itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: What ``sleep_1ms`` waits: the handler the concurrency sweep runs.
HANDLER_SECONDS = 0.001


def noop(ctx: Any) -> None:
    """Does nothing: what is left is workhive's own cost per item."""
    return None


async def sleep_1ms(ctx: Any) -> None:
    """Waits 1 ms without holding the process: a handler that waits on I/O, as an API call does."""
    await asyncio.sleep(HANDLER_SECONDS)
