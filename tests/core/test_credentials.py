"""Credentials: Secret, Credential, classify, and CredentialPool rotation on a fake clock."""

from __future__ import annotations

import asyncio
import copy
import logging
import pickle
from email.utils import formatdate
from typing import Any

import pytest
from fake_shared_state import DictStateBackend, FakeClock, shared

import workhive
from workhive.credentials import (
    Credential,
    CredentialPool,
    CredentialProvider,
    Outcome,
    Secret,
    Verdict,
    classify,
)
from workhive.errors import (
    AuthFailed,
    ConfigError,
    CredentialError,
    InvalidArgument,
    InvalidName,
    NoCredentialAvailable,
    RateLimited,
)
from workhive.plugin_manager import PluginManager

# -- Secret and Credential ---------------------------------------------------------


def test_secret_is_redacted_everywhere_but_reveal() -> None:
    secret = Secret("sk-abc")
    assert secret.reveal() == "sk-abc"
    for text in (str(secret), repr(secret), f"{secret}", f"{secret:>20}", "%s" % secret):  # noqa: UP031
        assert "sk-abc" not in text


def test_secret_equality_and_hash_follow_the_value() -> None:
    assert Secret("a-key") == Secret("a-key")
    assert Secret("a-key") != Secret("b-key")
    assert Secret("a-key") != "a-key"  # a Secret never equals a plain string
    assert hash(Secret("a-key")) == hash(Secret("a-key"))
    assert Secret("a-key").fingerprint() == Secret("a-key").fingerprint() != Secret("b-key").fingerprint()
    assert "a-key" not in Secret("a-key").fingerprint()


def test_secret_refuses_pickling_but_copies_as_itself() -> None:
    secret = Secret("sk-abc")
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)
    assert copy.copy(secret) is secret and copy.deepcopy(secret) is secret
    with pytest.raises(AttributeError):
        secret._value = "other"  # type: ignore[misc]


@pytest.mark.parametrize("bad", ["", "   ", None, b"bytes", 12])
def test_secret_must_be_a_nonempty_string(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        Secret(bad)


def test_credential_repr_has_the_name_not_the_secret() -> None:
    credential = Credential("KEY_1", "sk-abc", base_url="https://api.example", model="m", max_concurrency=2)
    assert isinstance(credential.secret, Secret)
    assert "KEY_1" in repr(credential) and "sk-abc" not in repr(credential)
    assert credential == Credential(
        "KEY_1", Secret("sk-abc"), base_url="https://api.example", model="m", max_concurrency=2
    )


def test_credential_validation() -> None:
    with pytest.raises(InvalidName):
        Credential("bad name", "sk")
    with pytest.raises(InvalidArgument):
        Credential("K", "sk", max_concurrency=0)


# -- classify ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (200, None, Outcome.OK),
        (204, None, Outcome.OK),
        (429, "slow down", Outcome.RATE_LIMITED),
        (429, '{"error": {"type": "insufficient_quota"}}', Outcome.QUOTA_EXHAUSTED),
        (429, b"You exceeded your current quota", Outcome.QUOTA_EXHAUSTED),
        (402, None, Outcome.QUOTA_EXHAUSTED),
        (401, "invalid x-api-key", Outcome.AUTH_FAILED),
        (403, None, Outcome.AUTH_FAILED),
        (500, None, Outcome.ERROR),
        (529, "overloaded", Outcome.ERROR),
        (400, "bad request", Outcome.ERROR),
    ],
)
def test_classify_by_status_and_body(status: int, body: object, outcome: Outcome) -> None:
    assert classify(status=status, body=body).outcome is outcome


def test_classify_reads_retry_after_in_either_form_and_any_case() -> None:
    now = 1_700_000_000.0
    assert classify(429, {"retry-after": "12"}, now=now).retry_after == 12.0
    assert classify(429, [("Retry-After", formatdate(now + 30, usegmt=True))], now=now).retry_after == 30.0
    assert classify(429, {"Retry-After-Ms": "1500", "Retry-After": "9"}, now=now).retry_after == 1.5
    assert classify(429, {"Retry-After": "whenever"}, now=now).retry_after is None


def test_classify_quota_with_retry_after_gives_a_reset_time() -> None:
    verdict = classify(429, {"Retry-After": "600"}, body={"error": {"code": "insufficient_quota"}}, now=1000.0)
    assert verdict.outcome is Outcome.QUOTA_EXHAUSTED and verdict.reset_at == 1600.0


def test_classify_dict_body_for_quota() -> None:
    assert classify(429, body={"error": {"code": "billing_hard_limit_reached"}}).outcome is Outcome.QUOTA_EXHAUSTED


class _Response:
    def __init__(self, status_code: int, headers: dict[str, str], text: str) -> None:
        self.status_code, self.headers, self.text = status_code, headers, text


class _HTTPStatusError(Exception):
    """Shaped like httpx.HTTPStatusError / SDK errors: the response hangs off the exception."""

    def __init__(self, response: _Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def test_classify_exceptions() -> None:
    assert classify(exc=RateLimited(retry_after=4.0)) == Verdict(
        Outcome.RATE_LIMITED, 4.0, None, "rate limited (handler)"
    )
    assert classify(exc=AuthFailed(reason="revoked")).reason == "revoked"
    http = classify(exc=_HTTPStatusError(_Response(429, {"Retry-After": "3"}, "too many")))
    assert (http.outcome, http.retry_after) == (Outcome.RATE_LIMITED, 3.0)
    assert classify(exc=_HTTPStatusError(_Response(401, {}, "nope"))).outcome is Outcome.AUTH_FAILED
    network = classify(exc=ConnectionResetError("peer reset"))
    assert network.outcome is Outcome.ERROR and "ConnectionResetError" in (network.reason or "")


def test_classify_nothing_is_an_error() -> None:
    assert classify().outcome is Outcome.ERROR


def test_classify_reason_is_bounded() -> None:
    assert len(classify(500, body="x" * 10_000).reason or "") <= 200


# -- the pool --------------------------------------------------------------------------


def creds(*names: str, limit: int | None = None) -> list[Credential]:
    return [Credential(n, f"sk-{n.lower()}-value", max_concurrency=limit) for n in names]


def make_pool(clock: FakeClock, *names: str, **kw: Any) -> CredentialPool:
    return CredentialPool(creds(*(names or ("A", "B", "C"))), clock=clock, sleep=clock.sleep, **kw)


def states(pool: CredentialPool) -> dict[str, str]:
    return {s.name: s.state for s in pool.snapshot()}


async def use(pool: CredentialPool, outcome: Outcome | None = None, **kw: Any) -> str:
    credential = await pool.acquire(timeout=0)
    try:
        if outcome is not None:
            await pool.report(credential, outcome, **kw)
    finally:
        pool.release(credential)
    return credential.name


@pytest.mark.asyncio
async def test_least_recently_used_first() -> None:
    pool = make_pool(FakeClock())
    assert [await use(pool) for _ in range(7)] == ["A", "B", "C", "A", "B", "C", "A"]


@pytest.mark.asyncio
async def test_rate_limited_cools_for_retry_after_and_the_others_go_on() -> None:
    clock = FakeClock()
    pool = make_pool(clock)
    assert await use(pool, Outcome.RATE_LIMITED, retry_after=20.0) == "A"
    snap = {s.name: s for s in pool.snapshot()}
    assert snap["A"].state == "cooling" and snap["A"].until == clock.now + 20.0
    assert [await use(pool) for _ in range(4)] == ["B", "C", "B", "C"]
    clock.advance(20.0)
    assert states(pool)["A"] == "available"
    assert await use(pool) == "A"  # least recently used of all three


@pytest.mark.asyncio
async def test_usable_says_whether_a_key_handed_out_earlier_may_still_be_called() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A", "B")
    held = await pool.acquire(timeout=0)
    assert held.name == "A" and pool.usable(held)
    await use(pool, Outcome.OK)  # B
    await pool.report(held, Outcome.RATE_LIMITED, retry_after=3.0)  # another call's 429 on A
    assert not pool.usable(held), "cooling: a worker that held it must not call into the cooldown"
    clock.advance(3.0)
    assert pool.usable(held)
    await pool.report(held, Outcome.AUTH_FAILED, reason="revoked")
    assert not pool.usable(held)
    pool.release(held)
    with pytest.raises(InvalidArgument, match="not one of this pool's"):
        pool.usable(Credential("Z", "sk-z-value"))


@pytest.mark.asyncio
async def test_rate_limited_without_retry_after_uses_a_default_that_grows_until_success() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A", default_cooldown=10.0, max_cooldown=35.0)
    cooldowns = []
    for _ in range(4):
        start = clock.now
        await use(pool, Outcome.RATE_LIMITED)
        cooldowns.append(pool.snapshot()[0].until - start)  # type: ignore[operator]
        clock.advance(cooldowns[-1])
    assert cooldowns == [10.0, 20.0, 35.0, 35.0]
    await use(pool, Outcome.OK)
    assert pool.snapshot()[0].failure_streak == 0
    await use(pool, Outcome.RATE_LIMITED)
    assert pool.snapshot()[0].until == clock.now + 10.0


@pytest.mark.asyncio
async def test_retry_after_is_clamped_to_max_cooldown() -> None:
    clock = FakeClock()
    pool = make_pool(clock, max_cooldown=60.0)
    await use(pool, Outcome.RATE_LIMITED, retry_after=86400.0)
    assert pool.snapshot()[0].until == clock.now + 60.0


@pytest.mark.asyncio
async def test_auth_failure_disables_with_the_reason_for_good() -> None:
    clock = FakeClock()
    pool = make_pool(clock)
    await use(pool, Outcome.AUTH_FAILED, reason="HTTP 401: invalid x-api-key")
    clock.advance(10**6)
    snap = {s.name: s for s in pool.snapshot()}
    assert (snap["A"].state, snap["A"].reason, snap["A"].until) == ("disabled", "HTTP 401: invalid x-api-key", None)
    assert {await use(pool) for _ in range(6)} == {"B", "C"}


@pytest.mark.asyncio
async def test_quota_parks_until_reset_or_a_default() -> None:
    clock = FakeClock()
    pool = make_pool(clock, default_quota_park=3600.0)
    await use(pool, Outcome.QUOTA_EXHAUSTED, reset_at=clock.now + 500.0)
    await use(pool, Outcome.QUOTA_EXHAUSTED)
    await use(pool, Outcome.QUOTA_EXHAUSTED, retry_after=50.0)
    until = {s.name: s.until - clock.now for s in pool.snapshot()}  # type: ignore[operator]
    assert until == {"A": 500.0, "B": 3600.0, "C": 50.0}
    assert set(states(pool).values()) == {"parked"}
    clock.advance(60.0)
    assert await use(pool) == "C"


@pytest.mark.asyncio
async def test_a_reset_time_in_the_past_falls_back_to_the_default() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A", default_quota_park=100.0)
    await use(pool, Outcome.QUOTA_EXHAUSTED, reset_at=clock.now - 5)
    assert pool.snapshot()[0].until == clock.now + 100.0


@pytest.mark.asyncio
async def test_errors_are_counted_but_do_not_block_the_key() -> None:
    pool = make_pool(FakeClock(), "A")
    await use(pool, Outcome.ERROR, reason="HTTP 500")
    await use(pool, Outcome.ERROR)
    snap = pool.snapshot()[0]
    assert (snap.state, snap.counts["errors"], snap.failure_streak) == ("available", 2, 2)


@pytest.mark.asyncio
async def test_counts_through_every_outcome() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A", "B", "C", "D")
    await use(pool, Outcome.OK)
    await use(pool, Outcome.RATE_LIMITED, retry_after=1)
    await use(pool, Outcome.AUTH_FAILED)
    await use(pool, Outcome.QUOTA_EXHAUSTED)
    await use(pool, Outcome.ERROR)
    counts = {s.name: s.counts for s in pool.snapshot()}
    assert counts["A"] == {"uses": 2, "ok": 1, "rate_limited": 0, "auth_failed": 0, "quota": 0, "errors": 1}
    assert counts["B"]["rate_limited"] == 1 and counts["C"]["auth_failed"] == 1 and counts["D"]["quota"] == 1
    assert states(pool) == {"A": "available", "B": "cooling", "C": "disabled", "D": "parked"}


@pytest.mark.asyncio
async def test_a_worse_state_is_not_downgraded_and_cooldowns_are_not_shortened() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A")
    (a,) = creds("A")
    await pool.report(a, Outcome.QUOTA_EXHAUSTED, retry_after=1000)
    await pool.report(a, Outcome.RATE_LIMITED, retry_after=5)
    assert states(pool) == {"A": "parked"}
    pool2 = make_pool(clock, "A")
    await pool2.report(a, Outcome.RATE_LIMITED, retry_after=100)
    await pool2.report(a, Outcome.RATE_LIMITED, retry_after=5)
    assert pool2.snapshot()[0].until == clock.now + 100


@pytest.mark.asyncio
async def test_when_all_are_cooling_acquire_waits_for_the_first_to_free_up() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A", "B")
    await use(pool, Outcome.RATE_LIMITED, retry_after=30)
    await use(pool, Outcome.RATE_LIMITED, retry_after=12)
    start = clock.now
    credential = await pool.acquire(timeout=60)
    assert credential.name == "B"
    assert clock.now - start == pytest.approx(12.0)


@pytest.mark.asyncio
async def test_the_wait_is_bounded_and_the_error_says_when() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A", "B")
    await use(pool, Outcome.RATE_LIMITED, retry_after=30)
    await use(pool, Outcome.QUOTA_EXHAUSTED, retry_after=90)
    with pytest.raises(NoCredentialAvailable, match=r"in 30\.0s") as info:
        await pool.acquire(timeout=5)
    assert info.value.next_available_at == clock.now + 30  # type: ignore[attr-defined]
    assert clock.slept == []  # no point sleeping 5 s for a key that frees up in 30


@pytest.mark.asyncio
async def test_timeout_zero_does_not_wait() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A")
    await use(pool, Outcome.RATE_LIMITED, retry_after=3)
    with pytest.raises(NoCredentialAvailable, match="A: cooling"):
        await pool.acquire(timeout=0)


@pytest.mark.asyncio
async def test_all_disabled_raises_at_once_with_the_reasons() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A", "B")
    await use(pool, Outcome.AUTH_FAILED, reason="HTTP 401")
    await use(pool, Outcome.AUTH_FAILED, reason="HTTP 403")
    with pytest.raises(NoCredentialAvailable, match=r"all 2 credentials are disabled.*A: disabled \(HTTP 401\)"):
        await pool.acquire()  # no timeout, yet it must not wait forever


@pytest.mark.asyncio
async def test_concurrency_limit_per_credential() -> None:
    clock = FakeClock()
    pool = CredentialPool(creds("A", "B", limit=1), clock=clock, sleep=clock.sleep)
    first, second = await pool.acquire(), await pool.acquire()
    assert {first.name, second.name} == {"A", "B"}
    with pytest.raises(NoCredentialAvailable, match="when a busy one is released"):
        await pool.acquire(timeout=0)
    waiter = asyncio.ensure_future(pool.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    pool.release(second)
    assert (await asyncio.wait_for(waiter, timeout=5)).name == second.name
    assert {s.name: s.in_flight for s in pool.snapshot()} == {first.name: 1, second.name: 1}


@pytest.mark.asyncio
async def test_busy_credentials_and_a_timeout() -> None:
    pool = CredentialPool(creds("A", limit=1))  # the real clock: the wait is short and bounded
    await pool.acquire()
    with pytest.raises(NoCredentialAvailable):
        await pool.acquire(timeout=0.05)


@pytest.mark.asyncio
async def test_bad_use_is_refused() -> None:
    pool = make_pool(FakeClock(), "A")
    (stranger,) = creds("Z")
    with pytest.raises(InvalidArgument, match="not one of this pool's"):
        await pool.report(stranger, Outcome.OK)
    with pytest.raises(InvalidArgument, match="released more often"):
        pool.release(creds("A")[0])
    with pytest.raises(InvalidArgument, match="retry_after"):
        await pool.report(creds("A")[0], Outcome.RATE_LIMITED, retry_after=-1)
    with pytest.raises(InvalidArgument, match="timeout"):
        await pool.acquire(timeout=-1)
    with pytest.raises(InvalidArgument, match="named 'A'"):
        CredentialPool(creds("A", "A"))
    with pytest.raises(ValueError):
        await pool.report(creds("A")[0], "melted")  # type: ignore[arg-type]
    assert states(pool) == {"A": "available"}


@pytest.mark.asyncio
async def test_report_verdict() -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A", "B")
    credential = await pool.acquire()
    await pool.report_verdict(credential, classify(429, {"Retry-After": "42"}, now=clock.now))
    pool.release(credential)
    assert pool.snapshot()[0].until == clock.now + 42


# -- shared by the fleet ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_one_429_is_enough_for_the_whole_fleet() -> None:
    clock = FakeClock()
    backend = DictStateBackend(clock)
    one = make_pool(clock, "A", "B", shared=shared(backend))
    two = make_pool(clock, "A", "B", shared=shared(backend))
    assert await use(one, Outcome.RATE_LIMITED, retry_after=30) == "A"
    await two.refresh()
    assert states(two) == {"A": "cooling", "B": "available"}
    assert [await use(two) for _ in range(3)] == ["B", "B", "B"]
    clock.advance(31)
    assert await use(two) == "A"


@pytest.mark.asyncio
async def test_disables_and_parks_are_shared_with_reasons() -> None:
    clock = FakeClock()
    backend = DictStateBackend(clock)
    one = make_pool(clock, shared=shared(backend))
    two = make_pool(clock, shared=shared(backend))
    await use(one, Outcome.AUTH_FAILED, reason="HTTP 401: revoked")
    await use(one, Outcome.QUOTA_EXHAUSTED, reset_at=clock.now + 100)
    await two.refresh()
    snap = {s.name: s for s in two.snapshot()}
    assert (snap["A"].state, snap["A"].reason) == ("disabled", "HTTP 401: revoked")
    assert (snap["B"].state, snap["B"].until) == ("parked", clock.now + 100)


@pytest.mark.asyncio
async def test_shared_state_is_reread_after_a_short_interval_not_on_every_acquire() -> None:
    clock = FakeClock()
    backend = DictStateBackend(clock)
    one = make_pool(clock, "A", "B", shared=shared(backend))
    two = make_pool(clock, "A", "B", shared=shared(backend), refresh_interval=1.0)
    await use(two)  # two has just read the (empty) shared state
    await use(one, Outcome.RATE_LIMITED, retry_after=60)  # one cools A
    assert states(two)["A"] == "available"  # not re-read yet
    clock.advance(1.0)
    assert await use(two) == "B"
    assert states(two)["A"] == "cooling"


@pytest.mark.asyncio
async def test_a_replaced_key_under_the_same_name_is_not_blocked() -> None:
    clock = FakeClock()
    backend = DictStateBackend(clock)
    old = CredentialPool([Credential("A", "sk-old")], clock=clock, shared=shared(backend))
    new = CredentialPool([Credential("A", "sk-new")], clock=clock, shared=shared(backend))
    await use(old, Outcome.AUTH_FAILED)
    await new.refresh()
    assert states(new) == {"A": "available"}


@pytest.mark.asyncio
async def test_a_waiting_pool_sees_another_process_free_nothing_but_waits_out_the_cooldown() -> None:
    clock = FakeClock()
    backend = DictStateBackend(clock)
    one = make_pool(clock, "A", shared=shared(backend))
    two = make_pool(clock, "A", shared=shared(backend))
    await use(one, Outcome.RATE_LIMITED, retry_after=5)
    start = clock.now
    assert (await two.acquire(timeout=10)).name == "A"
    assert clock.now - start >= 5


@pytest.mark.asyncio
async def test_shared_entries_expire_with_the_cooldown() -> None:
    clock = FakeClock()
    backend = DictStateBackend(clock)
    pool = make_pool(clock, "A", shared=shared(backend))
    await use(pool, Outcome.RATE_LIMITED, retry_after=5)
    assert await shared(backend).items() != {}
    clock.advance(5)
    assert await shared(backend).items() == {}


class _BrokenState(DictStateBackend):
    async def state_scan(self, namespace: str) -> dict[str, str]:
        raise ConnectionError("store is down")

    async def state_put(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        raise ConnectionError("store is down")


@pytest.mark.asyncio
async def test_a_failing_store_degrades_to_local_state(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    pool = make_pool(clock, "A", "B", shared=shared(_BrokenState(clock)))
    with caplog.at_level(logging.WARNING, logger="workhive.credentials"):
        assert await use(pool, Outcome.RATE_LIMITED, retry_after=9) == "A"
        assert await use(pool) == "B"
    assert "could not share" in caplog.text and "could not read" in caplog.text


@pytest.mark.asyncio
async def test_garbage_in_shared_state_is_ignored() -> None:
    clock = FakeClock()
    backend = DictStateBackend(clock)
    area = shared(backend)
    for value in ("nope", [1], {"state": "melted"}, {"state": "cooling", "until": "soon"}):
        await area.put("A", value)
        pool = make_pool(clock, "A", shared=area)
        await pool.refresh()
        assert states(pool) == {"A": "available"}


# -- providers through the plugin manager -------------------------------------------------------


class _ListProvider:
    def __init__(self, spec: str) -> None:
        self.names = spec.split("+")

    def credentials(self) -> list[Credential]:
        return creds(*self.names)


class _ListPlugin:
    @workhive.hookimpl
    def workhive_credentials(self) -> workhive.CredentialsPlugin:
        return workhive.CredentialsPlugin(name="list", factory=_ListProvider)


def test_from_specs() -> None:
    manager = PluginManager(entry_points=False, extra=[("list-plugin", _ListPlugin())])
    assert isinstance(_ListProvider("A"), CredentialProvider)
    pool = CredentialPool.from_specs(["list:A+B", "list:B+C"], manager=manager, default_cooldown=5.0)
    assert pool.names == ["A", "B", "C"] and pool.default_cooldown == 5.0
    with pytest.raises(ConfigError, match="provider:argument"):
        CredentialPool.from_specs(["A"], manager=manager)
    with pytest.raises(workhive.PluginNotFound, match="workhive-env-credentials"):
        CredentialPool.from_specs(["env:KEY"], manager=manager)
    with pytest.raises(CredentialError, match="no credentials found"):
        CredentialPool.from_specs([], manager=manager)


@pytest.mark.asyncio
async def test_the_late_429s_of_a_burst_count_from_when_their_calls_went_and_never_stretch_its_cooldown() -> None:
    """On a loaded machine a burst's 429s are heard over a while; each pushed the cooldown on."""
    clock = FakeClock()
    pool = make_pool(clock, "A")
    (a,) = pool.credentials()
    went = pool.now()
    clock.advance(0.4)  # the first 429 is heard 0.4 s after its call went: from now, as the provider answered
    await pool.report(a, Outcome.RATE_LIMITED, retry_after=1.0, sent_at=went)
    first_until = clock.now + 1.0
    assert pool.snapshot()[0].until == pytest.approx(first_until)
    clock.advance(0.3)  # a call of the same burst (it went before that cooldown began) is heard now
    await pool.report(a, Outcome.RATE_LIMITED, retry_after=1.0, sent_at=went + 0.1)
    assert pool.snapshot()[0].until == pytest.approx(first_until), "not stretched by its lateness"
    clock.advance(0.8)  # the cooldown is over; one more of that burst is heard
    await pool.report(a, Outcome.RATE_LIMITED, retry_after=1.0, sent_at=went + 0.2)
    (state,) = pool.snapshot()
    assert state.state == "available" and state.counts["rate_limited"] == 3, "counted, but nothing left to wait"
    await pool.report(a, Outcome.RATE_LIMITED, retry_after=1.0, sent_at=clock.now - 0.1)  # went after: a new burst
    assert pool.snapshot()[0].until == pytest.approx(clock.now + 1.0)
    with pytest.raises(InvalidArgument):
        await pool.report(a, Outcome.RATE_LIMITED, retry_after=1.0, sent_at=float("nan"))
