"""The lane board: which item of its batch each lane of a worker process is running, in memory its supervisor reads.

When a worker process dies, the supervisor charges the item that was running
(``runtime.aftermath``), so it must know which one that was. A lane that runs
one claimed item says so in a START event as it starts. A lane running a batch
of fast items (a no-op, a lookup: hundreds a claim) would say it per item, a
pipe write in the worker and a line parsed in the supervisor for every item:
a fifth of a core on a no-op fleet, on the cores the workers need.

Instead the worker announces each such batch once, in order (a BATCH event, at
the claim), and before each item runs writes the batch's number and the item's
place in it into its lane's slot here: eight bytes of memory, no system call.
The supervisor reads the slots only once the process is dead, after the last
of its events, so what it then finds is exactly what START events would have
told it. A slot that does not name the lane's latest announced batch means the
lane had not begun that batch: it ran nothing then (its last batch had ended).

The board is a ``memfd`` the supervisor creates and both map; where the
platform has none, there is no board and every item has its START event, as
before. A slot is a single aligned 8-byte store (batch number in the high 32
bits, the item's index in the low 32), so a process killed at any instant
leaves either the old value or the new one.

Example::

    board = LaneBoard.create(lanes=16)            # the supervisor, before it starts the process
    child = LaneBoard.attach(board.fd, lanes=16)  # in the worker process
    child.write(3, batch=7, index=2)              # lane 3 runs item 2 of batch 7
    assert board.read(3) == (7, 2)                # the supervisor, once the process is dead
"""

from __future__ import annotations

import contextlib
import mmap
import os

__all__ = ["LaneBoard"]

SLOT_BYTES = 8
#: batch numbers wrap here (they are compared for equality with the lane's latest announcement only)
BATCH_LIMIT = 1 << 32


class LaneBoard:
    """Shared slots, one per lane: ``(batch, index)`` of the item the lane runs now."""

    def __init__(self, fd: int, lanes: int, memory: mmap.mmap) -> None:
        self.fd = fd
        self.lanes = lanes
        self._memory = memory
        self._slots = memoryview(memory).cast("Q")

    @classmethod
    def create(cls, lanes: int) -> LaneBoard | None:
        """A new board of ``lanes`` zeroed slots (batch numbers start at 1); None where there is no ``memfd``."""
        make = getattr(os, "memfd_create", None)
        if make is None:
            return None
        try:
            fd = make("workhive-lanes", getattr(os, "MFD_CLOEXEC", 0))
        except OSError:
            return None
        try:
            return cls._map(fd, lanes, size=True)
        except (OSError, ValueError):
            os.close(fd)
            return None

    @classmethod
    def attach(cls, fd: int, lanes: int) -> LaneBoard:
        """The board behind ``fd`` (passed from the supervisor), in a worker process."""
        return cls._map(fd, lanes, size=False)

    @classmethod
    def _map(cls, fd: int, lanes: int, *, size: bool) -> LaneBoard:
        length = max(1, lanes) * SLOT_BYTES
        if size:
            os.ftruncate(fd, length)
        elif os.fstat(fd).st_size < length:
            raise ValueError(f"the lane board holds {os.fstat(fd).st_size // SLOT_BYTES} slots, not {lanes}")
        return cls(fd, lanes, mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))

    def write(self, lane: int, batch: int, index: int) -> None:
        """Lane ``lane`` runs item ``index`` of its batch numbered ``batch`` (from here until the next write)."""
        self._slots[lane] = (batch << 32) | index

    def read(self, lane: int) -> tuple[int, int]:
        """``(batch, index)`` last written for ``lane``; ``(0, 0)`` if never."""
        value: int = self._slots[lane]
        return value >> 32, value & 0xFFFFFFFF

    def close(self) -> None:
        """Unmap the board and close its descriptor (idempotent)."""
        if self.fd < 0:
            return
        self._slots.release()
        self._memory.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = -1
