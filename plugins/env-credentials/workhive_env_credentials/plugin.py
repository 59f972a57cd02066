"""The ``env-credentials`` plugin: registers the ``env`` credentials provider.

Imports nothing but the descriptor type; the provider module loads when a
spec such as ``env:ANTHROPIC_API_KEY`` is used.
"""

from __future__ import annotations

from typing import Any

import workhive


def _provider(spec: str) -> Any:
    from workhive_env_credentials.provider import EnvCredentials

    return EnvCredentials.from_spec(spec)


@workhive.hookimpl
def workhive_credentials() -> workhive.CredentialsPlugin:
    return workhive.CredentialsPlugin(
        name="env",
        factory=_provider,
        description="API keys from environment variables: env:PREFIX reads PREFIX and PREFIX_1 … PREFIX_N",
    )
