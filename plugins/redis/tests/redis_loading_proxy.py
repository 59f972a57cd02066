"""A stand-in for a Redis server that is still loading its data set, then serves (by forwarding).

While ``loading`` attempts remain, a connection gets what a loading Redis 7 gives: the
handshake (``HELLO``, ``AUTH``, ``CLIENT``, ``SELECT`` are allowed while loading) is
answered, and every other command gets ``-LOADING``. Each connection that sent a command
and got ``-LOADING`` counts as one attempt. Once no attempt is left, new connections are
forwarded byte for byte to a real server (the tests' own, under their own prefix). Nothing
here depends on time: the number of ``-LOADING`` answers is what the test sets.
"""

from __future__ import annotations

import asyncio
import contextlib

# What Redis lets a client run while it loads (their command flags include "loading").
_ALLOWED_WHILE_LOADING = {b"HELLO", b"AUTH", b"CLIENT", b"SELECT"}
_LOADING = b"-LOADING Redis is loading the dataset in memory\r\n"


async def _read_command(reader: asyncio.StreamReader) -> list[bytes] | None:
    """One RESP command (an array of bulk strings, or an inline one); None at EOF."""
    line = await reader.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.split()
    args = []
    for _ in range(int(line[1:])):
        header = await reader.readline()
        size = int(header[1:])
        args.append((await reader.readexactly(size + 2))[:-2])
    return args


class LoadingProxy:
    """Answers ``-LOADING`` on the first ``loading`` connections that send a command, then forwards."""

    def __init__(self, upstream_host: str, upstream_port: int, loading: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.loading_left = loading
        self.loading_answers = 0  # connections answered -LOADING
        self.forwarded = 0  # connections forwarded to the real server
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> LoadingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self.loading_left > 0:
                await self._still_loading(reader, writer)
            else:
                await self._forward(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _still_loading(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counted = False
        while (command := await _read_command(reader)) is not None:
            name = command[0].upper() if command else b""
            if name == b"HELLO":
                writer.write(b"%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n")
            elif name in _ALLOWED_WHILE_LOADING:
                writer.write(b"+OK\r\n")
            else:
                writer.write(_LOADING)
                if not counted:
                    counted = True
                    self.loading_left -= 1
                    self.loading_answers += 1
            await writer.drain()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.forwarded += 1
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            finally:
                with contextlib.suppress(Exception):
                    sink.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            up_writer.close()
