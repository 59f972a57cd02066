"""Counting the storage calls of a process, for benchmarks: ``CountingBackend`` and ``COUNT_CALLS_ENV``.

With ``WORKHIVE_COUNT_STORAGE_CALLS=<directory>`` in its environment, a fleet's
processes (``runtime.shared.open_hive``) wrap their storage backend in a
``CountingBackend``, which counts every call by method (a ``claim`` of 500 items
is one call) and writes ``<directory>/<pid>.json`` when the hive closes.
``bench/waiting.py`` adds those files up into storage operations per item.

>>> import asyncio, workhive
>>> async def demo():
...     async with workhive.open("memory://") as hive:
...         hive.storage = counting = CountingBackend(hive.storage)
...         await hive.pool("jobs").push({"n": 1})
...         return counting.counts
>>> asyncio.run(demo())
{'push': 1}
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["COUNT_CALLS_ENV", "CountingBackend"]

#: the environment variable that turns counting on in a fleet's processes (its value: where to write)
COUNT_CALLS_ENV = "WORKHIVE_COUNT_STORAGE_CALLS"


class CountingBackend:
    """A storage backend that counts each async method call of the backend it wraps.

    It has exactly the wrapped backend's async methods (optional ones included, so
    ``isinstance`` checks against ``Cancels`` and the like answer as for the
    backend), each counted as it is called; everything else is the backend's.
    ``close`` writes the counts to ``out`` (a directory) when one is given.
    """

    def __init__(self, inner: Any, out: str | Path | None = None) -> None:
        self._inner = inner
        self._out = Path(out) if out is not None else None
        self.counts: Counter[str] = Counter()
        for name in dir(inner):
            if name.startswith("_"):
                continue
            method = getattr(inner, name, None)
            if inspect.iscoroutinefunction(method):
                setattr(self, name, self._counted(name, method))

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        counts = self.counts
        if name == "close":

            @functools.wraps(method)
            async def close(*args: Any, **kwargs: Any) -> Any:
                counts[name] += 1
                try:
                    return await method(*args, **kwargs)
                finally:
                    self.write()

            return close

        @functools.wraps(method)
        async def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return await method(*args, **kwargs)

        return counted

    def write(self) -> None:
        """Write the counts so far to ``<out>/<pid>.json`` (nothing without ``out``)."""
        if self._out is None:
            return
        self._out.mkdir(parents=True, exist_ok=True)
        path = self._out / f"{os.getpid()}.json"
        path.write_text(json.dumps(dict(self.counts), sort_keys=True))

    def __getattr__(self, name: str) -> Any:
        # Only for what __init__ did not set: plain attributes (capabilities, options) of the backend.
        return getattr(self._inner, name)
