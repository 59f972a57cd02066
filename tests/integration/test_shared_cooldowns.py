"""Two processes share credential cooldowns through the SQLite backend's shared-state area.

One process learns that a key is rate-limited (or refused); another process,
with its own CredentialPool on the same database, avoids that key without
ever having called the API with it. The secret never reaches the database.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("workhive_sqlite")
# Processes meeting in one database: once in the Python matrix (the shared cooldowns themselves are
# tested in-process in tests/core/test_credentials.py on every Python).
pytestmark = pytest.mark.one_python

SECRETS = {"KEY_A": "sk-SHARED-CANARY-aaaa", "KEY_B": "sk-SHARED-CANARY-bbbb", "KEY_C": "sk-SHARED-CANARY-cccc"}

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    import workhive
    from workhive.credentials import Credential, CredentialPool, DEFAULT_NAMESPACE, Outcome

    db, role, secrets = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

    async def main():
        async with workhive.open(f"sqlite:///{db}") as hive:
            pool = CredentialPool(
                [Credential(name, value) for name, value in secrets.items()],
                shared=hive.shared(DEFAULT_NAMESPACE),
            )
            out = {}
            if role == "reporter":
                by_name = {c.name: c for c in [await pool.acquire() for _ in secrets]}
                await pool.report(by_name["KEY_A"], Outcome.RATE_LIMITED, retry_after=float(sys.argv[4]))
                await pool.report(by_name["KEY_C"], Outcome.AUTH_FAILED, reason="HTTP 401: key revoked")
            elif role == "user":
                await pool.refresh()
                out["before"] = [s.to_json() for s in pool.snapshot()]
                used = []
                for _ in range(3):
                    credential = await pool.acquire(timeout=0)
                    used.append(credential.name)
                    pool.release(credential)
                out["used"] = used
            elif role == "waiter":
                credential = await pool.acquire(timeout=30)
                out["got"] = credential.name
            print(json.dumps(out))

    asyncio.run(main())
    """
)


def run(tmp_path: Path, role: str, secrets: dict[str, str], *extra: str) -> dict[str, object]:
    script = tmp_path / "fleet_process.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "hive.db"), role, json.dumps(secrets), *extra],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    for secret in secrets.values():
        assert secret not in done.stdout and secret not in done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_cooldown_and_a_disable_seen_by_another_process(tmp_path: Path) -> None:
    run(tmp_path, "reporter", SECRETS, "3600")
    seen = run(tmp_path, "user", SECRETS)
    before = {s["name"]: s for s in seen["before"]}  # type: ignore[attr-defined, union-attr]
    assert before["KEY_A"]["state"] == "cooling"
    assert before["KEY_B"]["state"] == "available"
    assert (before["KEY_C"]["state"], before["KEY_C"]["reason"]) == ("disabled", "HTTP 401: key revoked")
    assert seen["used"] == ["KEY_B", "KEY_B", "KEY_B"]

    stored = b"".join(path.read_bytes() for path in tmp_path.glob("hive.db*"))
    assert b"KEY_A" in stored  # the state is there, under the key's name ...
    for secret in SECRETS.values():
        assert secret.encode() not in stored  # ... and the key itself is not


def test_another_process_waits_out_the_shared_cooldown(tmp_path: Path) -> None:
    only = {"KEY_A": SECRETS["KEY_A"]}
    run(tmp_path, "reporter", {**only, "KEY_C": SECRETS["KEY_C"]}, "1")
    assert run(tmp_path, "waiter", only) == {"got": "KEY_A"}


def test_a_different_key_under_the_same_name_is_not_affected(tmp_path: Path) -> None:
    run(tmp_path, "reporter", SECRETS, "3600")
    replaced = {name: value + "-rotated" for name, value in SECRETS.items()}
    seen = run(tmp_path, "user", replaced)
    assert {s["state"] for s in seen["before"]} == {"available"}  # type: ignore[union-attr, index]
