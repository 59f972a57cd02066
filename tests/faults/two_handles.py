"""A process with two hive handles on one SQLite file, beside the fleet (the ``handles`` scenario).

One handle stays open and reads the pool over and over; a second one is opened,
pushes an item and is closed again, every round. That is what an application
does that keeps a hive open and calls a library that opens its own: if
closing the second handle's file descriptors drops the first one's locks,
other processes take the file for unused and the items are lost. Each pushed
item's id and data are printed as one JSON line, so the drill can check them.

Run as ``python two_handles.py URL POOL STOP_FILE``: it stops, closing both
handles, once ``STOP_FILE`` exists.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import workhive


async def main(url: str, pool: str, stop_file: str) -> None:
    async with workhive.open(url) as first:
        reader = first.pool(pool)
        n = 0
        while not os.path.exists(stop_file):  # noqa: ASYNC240 - a cheap stat between rounds
            await reader.stats()
            n += 1
            data = {"n": 500_000 + os.getpid() % 1000 * 1000 + n, "fault": "second_handle"}
            async with workhive.open(url) as second:
                [item_id] = await second.pool(pool).push_many([data])
            await reader.stats()
            print(json.dumps({"id": item_id, "data": data}), flush=True)
            await asyncio.sleep(0.02)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
