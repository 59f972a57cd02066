"""Every test needs the server (skip, or fail under WORKHIVE_REQUIRE_SERVICES=1) and drops its schemas."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import postgres_server
import pytest


@pytest.fixture(autouse=True)
def _postgres_required_and_cleaned() -> Iterator[None]:
    postgres_server.require_server()
    yield
    postgres_server.drop_created()


@pytest.fixture
def schema() -> str:
    return postgres_server.schema_for(uuid.uuid4().hex)


@pytest.fixture
def url(schema: str) -> str:
    return postgres_server.url_for(schema)
