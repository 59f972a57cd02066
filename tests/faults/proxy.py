"""A TCP proxy between the fleet and its server that the nemesis can cut, stall, delay and half-open.

It runs an asyncio loop in a thread of the test process; the fleet connects to
``proxy.port`` instead of the server's. Faults, each until ``heal``:

* ``cut()``: every open connection is reset at once (both sides see the close);
* ``stall()``: nothing is forwarded in either direction; the bytes wait in the
  kernel's buffers and flow again, in order, on ``heal`` (a frozen network path);
* ``delay(seconds)``: every chunk waits that long before it is forwarded;
* ``half_open()``: the server side of every connection is closed while the
  client side stays open and its bytes are swallowed: the client never hears
  back and must time out on its own (a peer that vanished without a FIN).
  Connections opened meanwhile are swallowed the same way. ``heal`` lets new
  connections through; the half-open ones stay dead until their client closes.

>>> proxy = FaultProxy(("127.0.0.1", 5432)); proxy.start()  # doctest: +SKIP
>>> proxy.stall(); ...; proxy.heal()                        # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["FaultProxy"]

CHUNK = 65536


class _Link:
    """One client connection and its upstream."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter | None) -> None:
        self.client = client
        self.upstream = upstream
        self.swallowed = upstream is None
        self.tasks: list[asyncio.Task[None]] = []


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with an RST rather than a FIN, as a dropped path or a killed peer would look."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; see the module docstring for the faults."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._links: set[_Link] = set()
        self._flowing: asyncio.Event | None = None
        self._delay = 0.0
        self._half_open = False
        self._server: asyncio.base_events.Server | None = None
        self.connections = 0

    # -- control (from the test's thread) ---------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        self._call(self._listen)

    def close(self) -> None:
        self._call(self._shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def cut(self) -> None:
        """Reset every open connection."""
        self._call(self._cut)

    def stall(self) -> None:
        """Stop forwarding in both directions until ``heal``."""
        self._call(self._set, flowing=False)

    def delay(self, seconds: float) -> None:
        """Hold every chunk ``seconds`` before forwarding it, until ``heal``."""
        self._call(self._set, delay=seconds)

    def half_open(self) -> None:
        """Close the server side of every connection; clients are left talking to nobody."""
        self._call(self._set, half_open=True)

    def heal(self) -> None:
        """Forward normally again (half-open connections stay dead; new ones pass)."""
        self._call(self._set, flowing=True, delay=0.0, half_open=False)

    def _call(self, fn: Callable[..., Coroutine[Any, Any, Any]], **kwargs: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(fn(**kwargs), self._loop).result(timeout=60)

    # -- the loop's side --------------------------------------------------------------------
    async def _listen(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()

    async def _set(
        self, flowing: bool | None = None, delay: float | None = None, half_open: bool | None = None
    ) -> None:
        assert self._flowing is not None
        if flowing is True:
            self._flowing.set()
        elif flowing is False:
            self._flowing.clear()
        if delay is not None:
            self._delay = delay
        if half_open is not None:
            self._half_open = half_open
            if half_open:
                for link in list(self._links):
                    self._swallow(link)

    async def _cut(self) -> None:
        for link in list(self._links):
            for task in link.tasks:
                task.cancel()
            _reset(link.client)
            _reset(link.upstream)
        self._links.clear()

    def _swallow(self, link: _Link) -> None:
        """Drop the server side; from now on the client's bytes go nowhere."""
        if link.swallowed:
            return
        link.swallowed = True
        for task in link.tasks:
            task.cancel()
        _reset(link.upstream)
        link.upstream = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        if not self._half_open:
            try:
                upstream = await asyncio.open_connection(*self.target)
            except OSError:
                _reset(writer)  # the server is down: the client sees its connection refused, as it would
                return
        link = _Link(writer, None if upstream is None else upstream[1])
        self._links.add(link)
        try:
            if upstream is None or self._half_open:
                self._swallow(link)
                await self._drain_forever(reader)
                return
            up_reader, up_writer = upstream
            link.tasks = [
                asyncio.create_task(self._pump(reader, up_writer)),
                asyncio.create_task(self._pump(up_reader, writer)),
            ]
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
            if link.swallowed:  # half-opened meanwhile: keep the client hanging
                await self._drain_forever(reader)
                return
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for task in link.tasks:
                task.cancel()
            self._links.discard(link)
            _reset(link.upstream)
            _reset(writer)

    async def _drain_forever(self, reader: asyncio.StreamReader) -> None:
        """Read and drop the client's bytes until it closes."""
        with contextlib.suppress(OSError):
            while await reader.read(CHUNK):
                pass

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        with contextlib.suppress(OSError):
            while True:
                await self._flowing.wait()
                data = await reader.read(CHUNK)
                if not data:
                    return
                if self._delay:
                    await asyncio.sleep(self._delay)
                # A stall that began while this chunk was read holds it back too.
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
