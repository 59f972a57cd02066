"""workhive credentials from environment variables (``env:PREFIX``)."""

from workhive_env_credentials.provider import EnvCredentials

__all__ = ["EnvCredentials"]
