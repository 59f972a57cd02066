"""The contract every credential provider meets, as a base class for pytest.

Subclass it and make a provider that yields exactly the secrets handed in
(one credential each); ``monkeypatch`` is pytest's, for setting environment
variables or files the provider reads::

    from workhive.testing.credentials import CredentialsContract
    from my_package import FromFile

    class TestFromFile(CredentialsContract):
        def make_provider(self, monkeypatch, secrets):
            path = self.tmp / "keys"
            path.write_text("\\n".join(secrets))
            return FromFile(str(path))

The secrets are recognisable strings; the suite checks that the provider
yields them under stable, valid, non-secret names and that none of them shows
up in anything printed about a credential.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Sequence

import pytest

from workhive.credentials import Credential, CredentialProvider
from workhive.validation import check_name

__all__ = ["CredentialsContract"]


class CredentialsContract:
    """Base test class: override ``make_provider(monkeypatch, secrets)``."""

    def make_provider(self, monkeypatch: pytest.MonkeyPatch, secrets: Sequence[str]) -> CredentialProvider:
        raise NotImplementedError(
            "subclass CredentialsContract and return a provider yielding these secrets from make_provider"
        )

    secrets: tuple[str, ...] = (
        "sk-contract-SECRET-alpha-0001",
        "sk-contract-SECRET-bravo-0002",
        "sk-contract-SECRET-charlie-0003",
    )

    def _credentials(self, monkeypatch: pytest.MonkeyPatch, secrets: Sequence[str] | None = None) -> list[Credential]:
        provider = self.make_provider(monkeypatch, list(self.secrets if secrets is None else secrets))
        return list(provider.credentials())

    def test_is_a_provider(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert isinstance(self.make_provider(monkeypatch, list(self.secrets)), CredentialProvider)

    def test_yields_one_credential_per_secret(self, monkeypatch: pytest.MonkeyPatch) -> None:
        credentials = self._credentials(monkeypatch)
        assert all(isinstance(c, Credential) for c in credentials)
        assert sorted(c.secret.reveal() for c in credentials) == sorted(self.secrets)

    def test_names_are_unique_valid_and_not_secret(self, monkeypatch: pytest.MonkeyPatch) -> None:
        credentials = self._credentials(monkeypatch)
        names = [c.name for c in credentials]
        assert len(set(names)) == len(names)
        for name in names:
            assert check_name("credential", name) == name
            assert not any(secret in name for secret in self.secrets)

    def test_names_are_stable_between_calls(self, monkeypatch: pytest.MonkeyPatch) -> None:
        provider = self.make_provider(monkeypatch, list(self.secrets))
        first = [(c.name, c.secret.reveal()) for c in provider.credentials()]
        second = [(c.name, c.secret.reveal()) for c in provider.credentials()]
        assert first == second

    def test_no_secrets_no_credentials(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert self._credentials(monkeypatch, []) == []

    def test_secrets_never_printed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for credential in self._credentials(monkeypatch):
            printed = [
                repr(credential),
                str(credential),
                f"{credential}",
                f"{credential!r}",
                repr(credential.secret),
                str(credential.secret),
                f"{credential.secret}",
                f"{credential.secret:>40}",
                "%s %r" % (credential.secret, credential.secret),  # noqa: UP031 - the old form, checked on purpose
                repr(vars(credential) if hasattr(credential, "__dict__") else credential),
            ]
            for text in printed:
                assert credential.secret.reveal() not in text

    def test_secrets_refuse_to_be_pickled(self, monkeypatch: pytest.MonkeyPatch) -> None:
        credential = self._credentials(monkeypatch)[0]
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(credential)
        assert copy.deepcopy(credential) == credential
