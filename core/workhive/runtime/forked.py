"""Worker processes forked from the supervisor: started in milliseconds instead of a fresh interpreter's imports.

A worker process started as ``python -m workhive.runtime`` spends most of its
first 150-200 ms importing (the interpreter, asyncio, workhive, the storage
plugin and its driver) before it claims anything: as long as a no-op fleet
takes to drain a few thousand items. The supervisor has imported all of it
already, so where it is safe it forks instead, like Celery's prefork pool and
gunicorn's ``--preload``: the child keeps the imports and nothing else.

What the child leaves behind, so that it runs as a spawned one would:

* every inherited descriptor but its own three pipes and stdout is pointed at
  ``/dev/null`` (``dup2``), not closed: the supervisor's sockets, its event
  loop's epoll and self-pipe, its other children's pipes are released (a
  sibling still sees EOF when the supervisor dies), and no inherited object
  that still names one of those numbers can ever close a descriptor of the
  child's own;
* signal handlers and the wakeup descriptor the supervisor's event loop set
  (back to the defaults, as after ``exec``); a session of its own;
* ``sys.stdin``/``stdout``/``stderr`` objects (a test runner's capture objects
  in the parent would swallow the child's output) and the root logger's
  handlers (``process.main`` sets its own);
* the environment: the one a spawned child gets (``supervisor._child_env``);
* inherited objects are frozen out of the garbage collector (``gc.freeze``):
  the parent's garbage is never collected (nor finalized) in the child, and
  pages shared with the parent stay shared.

Forking is safe only when the supervisor's process runs one thread: a thread
holding a lock (in C or in Python) as the process forks leaves that lock held
forever in the child. ``fork_refusal`` says why not, and the supervisor then
starts ``python -m workhive.runtime`` as before (``FleetOptions.start_method``:
``auto`` forks when it is safe, ``spawn`` never does, ``fork`` always does).
The handler's module is imported by the supervisor before the fleet starts
(``run_fleet`` checks it), so a forked child has it imported too: what a module
does at import (a client object, a cache) is done once, in the supervisor. A
module that starts a thread at import makes the supervisor's process
multi-threaded, and ``auto`` then spawns.

>>> fork_refusal() is None or isinstance(fork_refusal(), str)
True
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from typing import IO

__all__ = ["CANNOT_FORK", "ForkedProcess", "fork_refusal", "fork_worker"]

#: how often ``ForkedProcess.wait`` looks again whether its child ended
WAIT_POLL = 0.005
#: ``fork_refusal`` where the platform has no fork, or no /proc to find a child's descriptors in
CANNOT_FORK = "this platform cannot fork workers (no fork, or no /proc/self/fd)"
#: the exit status of a forked child whose worker could not even begin (its traceback is on its stderr)
CHILD_CRASHED = 70


def _threads() -> int:
    """Threads of this process as the OS counts them (C threads included) where it says; else Python's count."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1])
    import threading

    return threading.active_count()


def fork_refusal() -> str | None:
    """Why this process cannot fork a worker safely right now, or None when it can.

    >>> fork_refusal() in (None, CANNOT_FORK) or "thread" in fork_refusal() or "macOS" in fork_refusal()
    True
    """
    if not hasattr(os, "fork") or not os.path.isdir("/proc/self/fd"):
        return CANNOT_FORK
    if sys.platform == "darwin":
        return "macOS's system libraries are not safe to use in a forked child"
    threads = _threads()
    if threads != 1:
        return f"{threads} threads run in the supervisor's process (a lock one holds would stay held in the child)"
    return None


class ForkedProcess:
    """The supervisor's handle on a forked worker: the part of ``subprocess.Popen`` it uses.

    ``returncode`` is ``Popen``'s: the exit status, or minus the signal that ended it.
    """

    def __init__(self, pid: int, stdin: IO[bytes], stderr: IO[bytes]) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stderr: IO[bytes] | None = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler set to ignore): its status is lost
                self.returncode = 255
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker process {self.pid}", timeout or 0.0)
            time.sleep(WAIT_POLL)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never signal a PID that was reaped (and may have been reused)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_worker(argv: list[str], env: dict[str, str], pass_fds: tuple[int, ...]) -> ForkedProcess:
    """Fork a worker process that runs ``workhive.runtime.process.main(argv)`` with ``env``.

    Its stdin and stderr are pipes (the handle's ``stdin``/``stderr``); ``pass_fds`` (its
    events pipe, its lane board) stay open in it under the same numbers, as ``Popen``'s
    ``pass_fds`` would. Raises ``OSError`` when the fork fails.
    """
    from workhive.runtime import process  # imported here, once: the children then have it

    stdin_r, stdin_w = os.pipe()
    err_r, err_w = os.pipe()
    # Signals with a Python handler are held back across the fork: until the child has reset
    # its handlers, a signal it got (the supervisor's SIGTERM to a child it just started) would
    # run the inherited C handler, which writes the signal's number to the wakeup descriptor it
    # shares with the supervisor's event loop, and the supervisor would take it as its own.
    # Held, it is delivered once the child's handlers are the defaults (a SIGTERM then ends it,
    # as it ends a spawned child that is still importing).
    handled = {sig for sig in signal.valid_signals() if callable(signal.getsignal(sig))}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in (stdin_r, stdin_w, err_r, err_w):
            os.close(fd)
        raise
    if pid == 0:  # the child: never returns into the supervisor's code
        code = CHILD_CRASHED
        try:
            _become_worker(stdin_r, err_w, pass_fds, env, handled)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            process.main(argv)  # ends with os._exit
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else CHILD_CRASHED
        except BaseException:
            with contextlib.suppress(BaseException):
                os.write(2, traceback.format_exc().encode(errors="backslashreplace"))
        finally:
            os._exit(code)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    os.close(stdin_r)
    os.close(err_w)
    return ForkedProcess(pid, os.fdopen(stdin_w, "wb"), os.fdopen(err_r, "rb"))


def _become_worker(
    stdin_fd: int, stderr_fd: int, pass_fds: tuple[int, ...], env: dict[str, str], handled: set[signal.Signals]
) -> None:
    """In the child, right after the fork: leave the supervisor's state behind (see the module's docstring).

    ``handled``: the signals that had a Python handler as the process forked (held until this returns).
    """
    os.setsid()
    signal.set_wakeup_fd(-1)
    for sig in handled:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    os.dup2(stdin_fd, 0)
    os.dup2(stderr_fd, 2)
    null = os.open(os.devnull, os.O_RDWR)
    keep = {0, 1, 2, *pass_fds, null}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                os.fstat(fd)
                os.dup2(null, fd)
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    gc.freeze()
