"""The secret-leak test: a recognisable key goes through every outcome and is found nowhere.

Everything a user or an operator could see is collected — log records at
DEBUG, str/repr/format of every object, exception messages and tracebacks
with locals, JSON of snapshots, the raw shared-state rows — and searched.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from fake_shared_state import DictStateBackend, FakeClock, shared

from workhive.credentials import Credential, CredentialPool, Outcome, Secret, classify
from workhive.errors import InvalidArgument, NoCredentialAvailable

SECRET = "sk-LEAKCANARY-9f8e7d6c5b4a"
OTHER = "sk-SECONDCANARY-0a1b2c3d"


def printed(obj: Any) -> list[str]:
    return [str(obj), repr(obj), f"{obj}", f"{obj!r}", f"{obj!s:>10}", "%s %r" % (obj, obj)]  # noqa: UP031


def exception_texts(exc: BaseException) -> list[str]:
    texts = [*printed(exc), repr(vars(exc))]
    for value in vars(exc).values():
        texts += printed(value)
    texts.append("".join(traceback.format_exception(exc)))
    # What a CLI printing tracebacks with locals would show of workhive's own frames (this test's
    # frames hold the canary on purpose, so they are left out).
    stack = traceback.TracebackException.from_exception(exc, capture_locals=True).stack
    library = [frame for frame in stack if "/workhive/" in frame.filename]
    assert library, "the exception should come from inside workhive"
    texts += [f"{frame.name}: {frame.locals}" for frame in library]
    return texts


@pytest.mark.asyncio
async def test_no_secret_anywhere(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    backend = DictStateBackend(clock)
    credentials = [Credential("CANARY_KEY", SECRET, base_url="https://api.example"), Credential("OTHER_KEY", OTHER)]
    pool = CredentialPool(credentials, shared=shared(backend), clock=clock, sleep=clock.sleep)
    fleetmate = CredentialPool(
        [Credential("CANARY_KEY", SECRET), Credential("OTHER_KEY", OTHER)], shared=shared(backend), clock=clock
    )
    seen: list[str] = []
    secret_echo = f"Incorrect API key provided: {SECRET}"  # some APIs echo the key back

    with caplog.at_level(logging.DEBUG):
        for response in [
            {"status": 200},
            {"status": 500, "body": "upstream failed"},
            {"status": 429, "headers": {"Retry-After": "7"}},
            {"status": 429, "body": '{"error": {"code": "insufficient_quota"}}'},
            {"status": 401, "body": secret_echo},
        ]:
            clock.advance(10_000)  # let any cooldown or park run out so the canary is chosen again
            credential = await pool.acquire(timeout=0)
            while credential.name != "CANARY_KEY":
                pool.release(credential)
                credential = await pool.acquire(timeout=0)
            verdict = classify(**response, now=clock.now)
            if response.get("body") != secret_echo:
                seen += printed(verdict)
            seen += printed(credential) + printed(credential.secret)
            await pool.report_verdict(credential, verdict)
            pool.release(credential)
            seen += [json.dumps([s.to_json() for s in pool.snapshot()], default=str)]
            seen += [str(pool.snapshot()), repr(pool.snapshot())]
        await pool.report(credentials[1], Outcome.RATE_LIMITED, reason=f"error for {OTHER}", retry_after=60)
        await pool.report(credentials[1], Outcome.ERROR, reason=f"HTTP 500: {OTHER}")

        # exceptions a user sees
        with pytest.raises(NoCredentialAvailable) as cooling:
            await pool.acquire(timeout=0)
        seen += exception_texts(cooling.value)
        waited = await pool.acquire()  # waits out OTHER_KEY's cooldown on the fake clock
        assert waited.name == "OTHER_KEY"
        await pool.report(waited, Outcome.AUTH_FAILED, reason=f"HTTP 403: key {OTHER} revoked")
        pool.release(waited)
        with pytest.raises(NoCredentialAvailable) as disabled:
            await pool.acquire()
        seen += exception_texts(disabled.value)
        try:
            pool.release(credentials[0])
        except InvalidArgument as exc:
            seen += exception_texts(exc)
        await fleetmate.refresh()
        seen += [str(fleetmate.snapshot()), json.dumps([s.to_json() for s in fleetmate.snapshot()])]

        # an exception whose message carries the key, reported through classify
        error = classify(exc=RuntimeError(f"auth header was Bearer {SECRET}"))
        await pool.report_verdict(credentials[0], error)

    seen += [record.getMessage() for record in caplog.records]
    seen += [repr(record.args) for record in caplog.records]
    seen += [caplog.text]
    seen += [value for value, _expiry in backend.rows.values()]
    seen += [key for _namespace, key in backend.rows]
    seen += [str(pool.snapshot()), repr(pool), repr(vars(pool))]

    assert any("CANARY_KEY" in text for text in seen)  # the search does look at real output
    assert {s.state for s in pool.snapshot()} == {"disabled"}
    for text in seen:
        assert SECRET not in text
        assert OTHER not in text


def test_secret_reveal_is_the_only_way_out() -> None:
    secret = Secret(SECRET)
    assert secret.reveal() == SECRET
    assert SECRET not in json.dumps({"key": secret}, default=str)
    with pytest.raises(TypeError):
        json.dumps({"key": secret})


class TestOneScrubber:
    """``workhive.redaction``: the secrets a credential pool holds are scrubbed wherever text leaves."""

    CANARY = "sk-SCRUBCANARY-77aa88bb99cc"

    @pytest.fixture(autouse=True)
    def _fresh(self):
        from workhive.redaction import forget_secrets

        forget_secrets()
        yield
        forget_secrets()

    def test_a_credential_pool_registers_its_keys_and_text_data_and_stored_errors_are_scrubbed(self) -> None:
        from workhive.pool import error_text
        from workhive.redaction import REDACTED, scrub, scrub_data

        assert scrub(f"echo {self.CANARY}") == f"echo {self.CANARY}"  # nothing registered yet
        CredentialPool([Credential("SCRUB_KEY", self.CANARY)])
        assert scrub(f"HTTP 401: {self.CANARY}!") == f"HTTP 401: {REDACTED}!"
        data = scrub_data({"reason": [self.CANARY], self.CANARY: 1, "n": 2})
        assert self.CANARY not in json.dumps(data) and data["n"] == 2
        stored = error_text(RuntimeError(f'{{"error": "Incorrect API key provided: {self.CANARY}"}}'))
        assert self.CANARY not in stored and stored.startswith("RuntimeError: ")

    def test_log_records_are_scrubbed_whatever_handler_writes_them(self, caplog: pytest.LogCaptureFixture) -> None:
        CredentialPool([Credential("SCRUB_KEY", self.CANARY)])
        logger = logging.getLogger("workhive.test.scrub")
        with caplog.at_level(logging.DEBUG, logger="workhive.test.scrub"):
            logger.warning("calling with %s", self.CANARY)
            try:
                raise ValueError(f"the API echoed {self.CANARY}")
            except ValueError:
                logger.exception("failed")
        assert caplog.records
        assert self.CANARY not in caplog.text
        assert "the API echoed **********" in caplog.text

    def test_short_values_are_not_treated_as_secrets(self) -> None:
        from workhive.redaction import register_secret, scrub

        register_secret("abc")
        assert scrub("abcabc") == "abcabc"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/jobs?schema=x", "postgresql://app:***@db:5432/jobs?schema=x"),
        ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
        ("postgresql://app@db/jobs", "postgresql://app@db/jobs"),
        ("sqlite:///.workhive/hive.db", "sqlite:///.workhive/hive.db"),
    ],
)
def test_urls_are_shown_without_their_password(url: str, shown: str) -> None:
    from workhive.urls import redact_url

    assert redact_url(url) == shown


# -- every form a key takes in text (issue 24) --------------------------------------------------------------
#: a key with the characters encoders change: + / = (base64 alphabets), a quote, a backslash, a space,
#: a non-ASCII letter and a character beyond the BMP (a surrogate pair in JSON)
ODD_KEY = 'sk-ODD+a/B=9"q\\é😀 z-LEAKED'
#: what an API key usually looks like: only + / = change when URL-encoded
B64_KEY = "sk-proj-Aa0+Bb1/Cc2=LEAKED"


def _lower_hex(text: str) -> str:
    return re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), text)


def _upper_json_hex(text: str) -> str:
    return re.sub(r"\\u[0-9a-f]{4}", lambda m: "\\u" + m.group()[2:].upper(), text)


def encoded_forms(key: str) -> dict[str, str]:
    """The key as each encoder writes it: the forms ``workhive.redaction`` promises to scrub."""
    dumped = json.dumps(key)[1:-1]
    forms = {
        "as is": key,
        "quote": quote(key),
        "quote safe=''": quote(key, safe=""),
        "quote_plus": quote_plus(key),
        "quote lower-case hex": _lower_hex(quote(key, safe="")),
        "quote_plus lower-case hex": _lower_hex(quote_plus(key)),
        "json.dumps": dumped,
        "json.dumps ensure_ascii=False": json.dumps(key, ensure_ascii=False)[1:-1],
        "JSON with \\/": dumped.replace("/", "\\/"),
        "JSON upper-case \\u hex": _upper_json_hex(dumped),
    }
    return forms


class TestEncodedSecrets:
    """A key quoted URL-encoded or JSON-escaped is scrubbed like the key as is."""

    @pytest.fixture(autouse=True)
    def _fresh(self):
        from workhive.redaction import forget_secrets

        forget_secrets()
        yield
        forget_secrets()

    def test_the_encoded_forms_differ_from_the_key(self) -> None:
        # Otherwise the cases below would test the key as is again.
        for key, distinct in ((ODD_KEY, 9), (B64_KEY, 4)):
            forms = encoded_forms(key)
            assert len(set(forms.values()) - {key}) == distinct, forms

    @pytest.mark.parametrize("key", [ODD_KEY, B64_KEY], ids=["odd", "base64-like"])
    @pytest.mark.parametrize("form", list(encoded_forms(ODD_KEY)))
    def test_every_form_is_scrubbed_from_text_and_stored_errors(self, key: str, form: str) -> None:
        from workhive.pool import error_text
        from workhive.redaction import REDACTED, contains_secret, scrub

        CredentialPool([Credential("ODD_KEY", key)])
        quoted = encoded_forms(key)[form]
        text = f"GET /v1?key={quoted}&x=1 -> 401"
        assert contains_secret(text)
        assert scrub(text) == f"GET /v1?key={REDACTED}&x=1 -> 401"
        stored = error_text(RuntimeError(f'HTTP 401: {{"error": "bad key {quoted}"}}'))
        assert stored == f'RuntimeError: HTTP 401: {{"error": "bad key {REDACTED}"}}'
        assert "LEAKED" not in stored

    def test_json_text_keeps_its_shape_and_stays_valid(self) -> None:
        from workhive.redaction import REDACTED, register_secret, scrub_json

        register_secret(ODD_KEY)
        result = {
            "echo": f"you sent {ODD_KEY}",
            "nested": [{"deep": [ODD_KEY, 1, 2.5, None, True]}, quote_plus(ODD_KEY)],
            ODD_KEY: "a key as an object key",
            quote(ODD_KEY): "and URL-encoded, colliding with it once scrubbed",
            "body": json.dumps({"key": ODD_KEY}),  # JSON inside a string: the key is JSON-escaped there
            "n": 7,
        }
        text = json.dumps(result, separators=(",", ":"), ensure_ascii=False)
        clean = scrub_json(text)
        assert "LEAKED" not in clean
        assert json.loads(clean) == {
            "echo": f"you sent {REDACTED}",
            "nested": [{"deep": [REDACTED, 1, 2.5, None, True]}, REDACTED],
            REDACTED: "a key as an object key",
            f"{REDACTED} (2)": "and URL-encoded, colliding with it once scrubbed",
            "body": json.dumps({"key": REDACTED}),
            "n": 7,
        }
        untouched = '{"a":[1,2.5,null,"x"],"b":"\\u001b"}'
        assert scrub_json(untouched) is untouched

    def test_a_credentials_reason_shared_with_the_fleet_is_scrubbed_in_every_form(self) -> None:
        import asyncio

        clock = FakeClock()
        backend = DictStateBackend(clock)
        credential = Credential("ODD_KEY", ODD_KEY)
        pool = CredentialPool([credential], shared=shared(backend), clock=clock, sleep=clock.sleep)
        reason = f"HTTP 401: key={quote_plus(ODD_KEY)} body={json.dumps({'k': ODD_KEY})}"
        asyncio.run(pool.report(credential, Outcome.AUTH_FAILED, reason=reason))
        [state] = pool.snapshot()
        assert state.state == "disabled" and "HTTP 401: key=**********" in (state.reason or "")
        rows = json.dumps([value for value, _expiry in backend.rows.values()], default=str)
        for text in (state.reason or "", rows, str(pool.snapshot())):
            assert "LEAKED" not in text


def test_a_reason_is_scrubbed_before_it_is_cut_to_length() -> None:
    from workhive.redaction import forget_secrets

    key = "sk-TRUNCATED-key-0123456789abcdef"
    forget_secrets()
    try:
        CredentialPool([Credential("CUT_KEY", key)])
        for cut_at in range(150, 200, 7):  # the key straddles the 200-character limit somewhere in here
            verdict = classify(exc=RuntimeError("x" * cut_at + key))
            assert "TRUNCATED" not in (verdict.reason or "") and "sk-TRU" not in (verdict.reason or ""), verdict
    finally:
        forget_secrets()
