"""Every Redis test needs the shared server (skip, or fail if WORKHIVE_REQUIRE_SERVICES=1) and drops its prefixes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis_server


@pytest.fixture(autouse=True)
def _own_prefixes() -> Iterator[None]:
    redis_server.require_redis()
    yield
    created, redis_server._created[:] = list(redis_server._created), []
    if created:
        redis_server.delete_prefixes(created)
