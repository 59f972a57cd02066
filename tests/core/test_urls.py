"""URLs printed by workhive never carry a password."""

from __future__ import annotations

import pytest

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
