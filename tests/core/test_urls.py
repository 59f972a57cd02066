"""URLs printed by workhive never carry a password, and no URL or spec takes an option twice."""

from __future__ import annotations

import pytest

from workhive.errors import ConfigError
from workhive.urls import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/jobs?schema=w", "postgresql://app:***@db:5432/jobs?schema=w"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("rediss://user:s3cret@h", "rediss://user:***@h"),
        ("unix:///tmp/r.sock?password=s3cret&db=1", "unix:///tmp/r.sock?password=***&db=1"),
        ("postgresql://h/db?sslmode=require&password=s3cret", "postgresql://h/db?sslmode=require&password=***"),
        ("sqlite:///.workhive/hive.db", "sqlite:///.workhive/hive.db"),
        ("memory://", "memory://"),
        ("postgres://user@h/db", "postgres://user@h/db"),
    ],
)
def test_passwords_are_redacted_and_the_rest_kept(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(url) and "ss@" not in redact_url(url)


# -- passwords written with raw reserved characters (issue 24) ---------------------------
# Every piece of the password carries the canary, so any fragment that shows is caught.
RESERVED = ["@", "?", "#", "/", ":"]


def canary_password(char: str) -> str:
    return f"ssCANARY1{char}ssCANARY2{char}ssCANARY3"


def canary_urls(char: str) -> list[str]:
    password = canary_password(char)
    return [
        f"redis://user:{password}@cache:6379/0?prefix=p",
        f"redis://:{password}@cache:6379/0",
        f"rediss://user:{password}@cache",
        f"postgresql://app:{password}@db.example:5432/jobs?schema=w",
        f"postgres://app:{password}@db/jobs",
        f"user:{password}@db/jobs",  # no scheme at all
    ]


@pytest.mark.parametrize("char", RESERVED)
def test_a_password_with_a_raw_reserved_character_is_masked_whole(char: str) -> None:
    for url in canary_urls(char):
        shown = redact_url(url)
        assert "CANARY" not in shown, (url, shown)
        assert "***" in shown


@pytest.mark.parametrize("char", RESERVED)
def test_the_host_and_options_stay_readable_after_masking(char: str) -> None:
    password = canary_password(char)
    assert redact_url(f"redis://user:{password}@cache:6379/0?prefix=p") == "redis://user:***@cache:6379/0?prefix=p"
    assert redact_url(f"postgresql://app:{password}@db:5432/jobs") == "postgresql://app:***@db:5432/jobs"


@pytest.mark.parametrize("char", RESERVED)
def test_url_password_reads_the_whole_password(char: str) -> None:
    from workhive.urls import url_password

    password = canary_password(char)
    assert url_password(f"redis://user:{password}@cache:6379/0") == password
    assert url_password(f"postgresql://app:{password}@db/jobs?schema=w") == password


@pytest.mark.parametrize("char", RESERVED)
def test_the_whole_password_is_registered_for_scrubbing(char: str) -> None:
    from workhive.redaction import forget_secrets, register_url_password, scrub

    password = canary_password(char)
    try:
        register_url_password(f"postgresql://app:{password}@db/jobs")
        text = scrub(f"driver said: bad password {password!r} for app")
    finally:
        forget_secrets()
    assert "CANARY" not in text, text


@pytest.mark.parametrize("char", ["?", "#", "/"])
def test_a_password_that_would_be_read_as_host_port_or_path_is_refused_without_showing_it(char: str) -> None:
    from workhive.urls import check_userinfo

    for url in canary_urls(char):
        with pytest.raises(ConfigError, match="Percent-encode") as info:
            check_userinfo(url, "storage URL")
        assert "CANARY" not in str(info.value) and "CANARY" not in repr(vars(info.value))
        assert "%2F" in str(info.value)


@pytest.mark.parametrize("char", ["@", ":"])
def test_a_raw_at_sign_or_colon_in_the_password_is_read_like_urlsplit_reads_it(char: str) -> None:
    from workhive.urls import check_userinfo

    for url in canary_urls(char):
        check_userinfo(url)  # no error: the host is after the last '@', the password after the first ':'


@pytest.mark.parametrize(
    "url",
    ["sqlite:///data/a@b.db", "unix:///run/a@b.sock?db=1", "postgres://user@h/db", "redis://cache:6379/0"],
)
def test_urls_without_a_password_are_neither_masked_nor_refused(url: str) -> None:
    from workhive.urls import check_userinfo

    check_userinfo(url)
    assert redact_url(url) == url


def test_a_query_password_with_a_raw_hash_is_masked_whole() -> None:
    assert redact_url("postgresql://h/db?password=ssCANARY1#ssCANARY2&schema=w") == (
        "postgresql://h/db?password=***&schema=w"
    )


def test_an_invalid_scheme_is_reported_without_the_password() -> None:
    from workhive.urls import scheme_of

    with pytest.raises(ConfigError, match="invalid scheme") as info:
        scheme_of("Bad Scheme://user:ss/CANARY1@h/db")
    assert "CANARY" not in str(info.value) and "CANARY" not in repr(vars(info.value))


# -- an option given twice (issue 24) ---------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:ssCANARY1@db/jobs?schema=a&schema=b",
        "redis://:ssCANARY1@cache:6379/0?prefix=a&prefix=a",
        "sqlite:///hive.db?synchronous=full&busy_timeout=1&synchronous=off",
    ],
)
def test_url_query_refuses_an_option_given_twice(url: str) -> None:
    from workhive.urls import url_query

    with pytest.raises(ConfigError, match=r"gives '(schema|prefix|synchronous)' twice: give each option once") as info:
        url_query(url, "storage URL")
    assert "CANARY" not in str(info.value) and "CANARY" not in repr(vars(info.value))
    assert info.value.option in ("schema", "prefix", "synchronous")  # type: ignore[attr-defined]


def test_a_secret_option_given_twice_is_refused_without_its_values() -> None:
    from workhive.urls import url_query

    with pytest.raises(ConfigError, match="'password' twice") as info:
        url_query("unix:///tmp/r.sock?password=ssCANARY1&password=ssCANARY2")
    assert "CANARY" not in str(info.value) and "CANARY" not in repr(vars(info.value))


def test_a_strategy_spec_refuses_a_parameter_given_twice() -> None:
    from workhive.urls import parse_spec

    with pytest.raises(ConfigError, match="'base' twice"):
        parse_spec("full-jitter?base=0.5&base=2")
    assert parse_spec("full-jitter?base=0.5&cap=9") == ("full-jitter", {"base": "0.5", "cap": "9"})
