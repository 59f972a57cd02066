"""The pure parts of stopping a fleet: requests vs. signals, the wait on storage, scrubbed error output.

No timing is asserted: clocks are fakes, and storage calls that must run out of time never return,
so how many calls were made does not depend on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from workhive.errors import ConfigError, HiveNotFound, StorageUnavailable
from workhive.redaction import REDACTED, forget_secrets, register_secret
from workhive.runtime.patience import (
    DEFAULT_RETRY_WINDOW,
    MIN_RETRY_WINDOW,
    WaitBudget,
    open_within_window,
    retry_window,
)
from workhive.runtime.relay import KEEP_BACK, MAX_LINE, OutputRelay
from workhive.runtime.stop_requests import ECHO_WINDOW, StopRequests


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TestStopRequests:
    def test_a_signal_delivered_to_the_process_and_to_its_group_is_one_request(self):
        clock = FakeClock()
        requests = StopRequests(clock=clock)
        assert requests.note(signal.SIGTERM)  # `timeout`: to the process...
        clock.now += 0.001
        assert not requests.note(signal.SIGTERM)  # ...and to its group
        assert requests.count == 1 and requests.echoes == 1

    def test_the_same_signal_later_is_a_second_request(self):
        clock = FakeClock()
        requests = StopRequests(clock=clock)
        assert requests.note(signal.SIGINT)
        clock.now += ECHO_WINDOW
        assert requests.note(signal.SIGINT)  # Ctrl-C again, after the "stopping" message
        assert requests.count == 2

    def test_a_different_signal_is_never_an_echo(self):
        clock = FakeClock()
        requests = StopRequests(clock=clock)
        assert requests.note(signal.SIGTERM)
        assert requests.note(signal.SIGINT)
        assert requests.count == 2

    def test_echoes_do_not_extend_the_window(self):
        clock = FakeClock()
        requests = StopRequests(clock=clock)
        requests.note(signal.SIGTERM)
        clock.now += ECHO_WINDOW * 0.9
        assert not requests.note(signal.SIGTERM)
        clock.now += ECHO_WINDOW * 0.2  # past the window of the request, though not of the echo
        assert requests.note(signal.SIGTERM)


class _Store:
    def __init__(self, retry_for: object) -> None:
        self.retry_for = retry_for


class _Config:
    def __init__(self, retry_for: object) -> None:
        self.config = _Store(retry_for)


class TestRetryWindow:
    def test_read_from_the_backend_or_its_config(self):
        assert retry_window(_Store(10)) == 10.0
        assert retry_window(_Config(60.0)) == 60.0

    def test_a_backend_without_one_gets_the_default_and_zero_gets_the_floor(self):
        assert retry_window(object()) == DEFAULT_RETRY_WINDOW
        assert retry_window(_Store("soon")) == DEFAULT_RETRY_WINDOW
        assert retry_window(_Store(0)) == MIN_RETRY_WINDOW


async def _never() -> None:
    await asyncio.Event().wait()  # a call to a store that does not answer


class TestWaitBudget:
    def test_calls_side_by_side_spend_the_time_they_overlap_once_then_nothing_more_is_called(self):
        async def main() -> tuple[list[object], WaitBudget, list[str]]:
            budget = WaitBudget(0.05, "the test's stop")
            results = await asyncio.gather(
                *(budget.call(f"call {n}", _never()) for n in range(3)), return_exceptions=True
            )
            called = []

            async def recorded() -> None:
                called.append("made")

            with pytest.raises(StorageUnavailable, match="are spent"):
                await budget.call("a later call", recorded())
            return results, budget, called

        results, budget, called = asyncio.run(main())
        assert all(isinstance(r, StorageUnavailable) for r in results), results
        assert budget.calls == 3 and budget.spent and called == []

    def test_a_quick_call_returns_its_result_and_leaves_the_rest(self):
        async def main() -> tuple[int, WaitBudget]:
            budget = WaitBudget(3600.0, "the test's stop")

            async def answer() -> int:
                return 7

            return await budget.call("a quick call", answer()), budget

        value, budget = asyncio.run(main())
        assert value == 7 and not budget.spent and budget.left > 3000

    def test_what_a_call_raises_propagates(self):
        async def main() -> None:
            budget = WaitBudget(3600.0, "the test's stop")

            async def refused() -> None:
                raise StorageUnavailable("connection refused")

            await budget.call("a refused call", refused())

        with pytest.raises(StorageUnavailable, match="connection refused"):
            asyncio.run(main())

    def test_cut_ends_the_call_in_flight_and_refuses_the_next(self):
        async def main() -> tuple[BaseException | None, WaitBudget]:
            budget = WaitBudget(3600.0, "the test's stop")
            started = asyncio.Event()

            async def hangs() -> None:
                started.set()
                await _never()

            call = asyncio.create_task(budget.call("a call that hangs", hangs()))
            await asyncio.wait_for(started.wait(), 60)
            assert budget.waiting
            budget.cut()
            error = await asyncio.wait_for(asyncio.gather(call, return_exceptions=True), 60)
            return error[0], budget

        error, budget = asyncio.run(main())
        assert isinstance(error, StorageUnavailable) and "stopped on request" in str(error)
        assert budget.spent and budget.cut_short


class TestOutputRelay:
    @pytest.fixture(autouse=True)
    def _secret(self):
        register_secret("sk-relay-test-0123456789")
        yield
        forget_secrets()

    def _relay(self, data: bytes) -> str:
        read_fd, write_fd = os.pipe()
        shown: list[str] = []
        relay = OutputRelay(read_fd, write=shown.append)
        try:
            view = memoryview(data)
            while view:  # a pipe holds 64 KiB: pass it on as it fills
                written = os.write(write_fd, view[:16384])
                view = view[written:]
                relay.read()
        finally:
            os.close(write_fd)
        while relay.read():
            pass
        relay.close()
        return "".join(shown)

    def test_lines_are_passed_on_scrubbed(self):
        text = self._relay(b"Traceback: fatal: key sk-relay-test-0123456789\nlast words, no newline")
        assert text == f"Traceback: fatal: key {REDACTED}\nlast words, no newline"

    def test_a_secret_across_the_cut_of_a_very_long_line_is_still_scrubbed(self):
        for offset in (MAX_LINE - 10, MAX_LINE - KEEP_BACK - 5, MAX_LINE + 1):
            data = b"x" * offset + b"sk-relay-test-0123456789" + b"y" * (MAX_LINE // 2)
            text = self._relay(data)
            assert "sk-relay" not in text and "0123456789" not in text and REDACTED in text
            assert len(text) == len(data) - len("sk-relay-test-0123456789") + len(REDACTED)

    def test_bytes_that_are_not_utf8_do_not_stop_the_relay(self):
        text = self._relay(b"\xff\xfe bad bytes sk-relay-test-0123456789\n")
        assert REDACTED in text and "sk-relay" not in text


class _FlakyHive:
    """A hive whose store refuses ``failures`` opens with ``error``, then opens; time is the test's."""

    def __init__(self, failures: int, error: Exception, retry_for: float = 5.0) -> None:
        self.failures, self.error, self.opened, self.tries = failures, error, False, 0
        self.storage = type("S", (), {"retry_for": retry_for})()

    async def open(self) -> None:
        self.tries += 1
        if self.tries <= self.failures:
            raise self.error
        self.opened = True


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


class TestOpenWithinWindow:
    def test_a_store_out_for_a_moment_is_waited_for(self) -> None:
        hive, clock = _FlakyHive(4, StorageUnavailable("did not answer within 3s")), _Clock()
        asyncio.run(open_within_window(hive, sleep=clock.sleep, clock=clock))
        assert hive.opened and hive.tries == 5 and clock.now < 5.0

    def test_a_store_out_for_longer_than_its_window_fails_with_its_error(self) -> None:
        hive, clock = _FlakyHive(10**6, StorageUnavailable("did not answer within 3s"), retry_for=5.0), _Clock()
        with pytest.raises(StorageUnavailable, match="did not answer"):
            asyncio.run(open_within_window(hive, sleep=clock.sleep, clock=clock))
        assert not hive.opened and 5.0 - 2.0 <= clock.now <= 5.0  # waited out the window, no longer

    @pytest.mark.parametrize("error", [ConfigError("bad option"), HiveNotFound("no hive at x")])
    def test_what_is_not_a_passing_fault_raises_at_once(self, error: Exception) -> None:
        hive, clock = _FlakyHive(1, error), _Clock()
        with pytest.raises(type(error)):
            asyncio.run(open_within_window(hive, sleep=clock.sleep, clock=clock))
        assert hive.tries == 1 and clock.now == 0.0
