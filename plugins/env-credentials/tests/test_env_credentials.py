"""The env-credentials provider: the contract, then numbering, gaps, empties and settings."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from workhive.credentials import CredentialPool, CredentialProvider
from workhive.errors import ConfigError, CredentialError
from workhive.plugin_manager import PluginManager
from workhive.testing.credentials import CredentialsContract
from workhive_env_credentials import EnvCredentials

PREFIX = "WH_TEST_API_KEY"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("WH_TEST_", "WH_OTHER_")):
            monkeypatch.delenv(name)


class TestEnvCredentialsContract(CredentialsContract):
    def make_provider(self, monkeypatch: pytest.MonkeyPatch, secrets: Sequence[str]) -> CredentialProvider:
        for i, secret in enumerate(secrets, start=1):
            monkeypatch.setenv(f"{PREFIX}_{i}", secret)
        return EnvCredentials.from_spec(PREFIX)


def names(provider: EnvCredentials) -> list[str]:
    return [c.name for c in provider.credentials()]


def test_plain_and_numbered_in_number_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREFIX, "sk-plain")
    for n in (10, 2, 1):
        monkeypatch.setenv(f"{PREFIX}_{n}", f"sk-{n}")
    monkeypatch.setenv(f"{PREFIX}_3", "sk-3")
    for n in range(4, 10):
        monkeypatch.setenv(f"{PREFIX}_{n}", f"sk-{n}")
    got = names(EnvCredentials([PREFIX]))
    assert got == [PREFIX] + [f"{PREFIX}_{n}" for n in range(1, 11)]


def test_a_gap_is_warned_about_and_keys_after_it_are_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(f"{PREFIX}_1", "sk-1")
    monkeypatch.setenv(f"{PREFIX}_2", "sk-2")
    monkeypatch.setenv(f"{PREFIX}_4", "sk-4")
    monkeypatch.setenv(f"{PREFIX}_150", "sk-150")  # far beyond any fixed scan bound
    with caplog.at_level(logging.WARNING):
        got = names(EnvCredentials([PREFIX]))
    assert got == [f"{PREFIX}_1", f"{PREFIX}_2", f"{PREFIX}_4", f"{PREFIX}_150"]
    assert f"{PREFIX}_3" in caplog.text and "gap" in caplog.text


def test_numbering_may_start_late_but_leading_zeros_are_refused_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(f"{PREFIX}_2", "sk-2")
    monkeypatch.setenv(f"{PREFIX}_01", "sk-01")
    with caplog.at_level(logging.WARNING):
        got = names(EnvCredentials([PREFIX]))
    assert got == [f"{PREFIX}_2"]
    assert f"{PREFIX}_01 is ignored" in caplog.text
    assert f"{PREFIX}_1" in caplog.text  # the gap before _2


@pytest.mark.parametrize("empty", ["", "   ", "\n\t"])
def test_empty_values_are_ignored_with_a_warning_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, empty: str
) -> None:
    monkeypatch.setenv(f"{PREFIX}_1", empty)
    monkeypatch.setenv(f"{PREFIX}_2", "sk-REAL-two")
    with caplog.at_level(logging.WARNING):
        got = names(EnvCredentials([PREFIX]))
    assert got == [f"{PREFIX}_2"]
    assert f"{PREFIX}_1 is set but empty" in caplog.text
    assert "sk-REAL-two" not in caplog.text


def test_values_are_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREFIX, "  sk-with-newline\n")
    (credential,) = EnvCredentials([PREFIX]).credentials()
    assert credential.secret.reveal() == "sk-with-newline"


def test_the_same_key_under_two_names_is_used_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(PREFIX, "sk-SAME-value")
    monkeypatch.setenv(f"{PREFIX}_1", "sk-SAME-value")
    monkeypatch.setenv(f"{PREFIX}_2", "sk-other")
    with caplog.at_level(logging.WARNING):
        got = names(EnvCredentials([PREFIX]))
    assert got == [PREFIX, f"{PREFIX}_2"]
    assert f"{PREFIX}_1 holds the same key as {PREFIX}" in caplog.text
    assert "sk-SAME-value" not in caplog.text


def test_base_url_model_and_limit_per_key_with_prefix_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(f"{PREFIX}_1", "sk-1")
    monkeypatch.setenv(f"{PREFIX}_2", "sk-2")
    monkeypatch.setenv(f"{PREFIX}_BASE_URL", "https://api.example/v1")
    monkeypatch.setenv(f"{PREFIX}_BASE_URL_2", "https://proxy.example/v1")
    monkeypatch.setenv(f"{PREFIX}_MODEL_1", "big")
    monkeypatch.setenv(f"{PREFIX}_MAX_CONCURRENCY_2", "3")
    one, two = EnvCredentials([PREFIX]).credentials()
    assert (one.base_url, one.model, one.max_concurrency) == ("https://api.example/v1", "big", None)
    assert (two.base_url, two.model, two.max_concurrency) == ("https://proxy.example/v1", None, 3)


def test_settings_variables_are_not_mistaken_for_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(f"{PREFIX}_1", "sk-1")
    monkeypatch.setenv(f"{PREFIX}_BASE_URL_1", "https://api.example")
    monkeypatch.setenv(f"{PREFIX}_MODEL", "m")
    assert names(EnvCredentials([PREFIX])) == [f"{PREFIX}_1"]


@pytest.mark.parametrize("bad", ["0", "-2", "many", "1.5"])
def test_bad_concurrency_limit_names_the_variable(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(f"{PREFIX}_1", "sk-1")
    monkeypatch.setenv(f"{PREFIX}_MAX_CONCURRENCY_1", bad)
    with pytest.raises(ConfigError, match=f"{PREFIX}_MAX_CONCURRENCY_1"):
        list(EnvCredentials([PREFIX]).credentials())


def test_several_prefixes_combined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WH_OTHER_KEY", "sk-other")
    monkeypatch.setenv(f"{PREFIX}_1", "sk-1")
    assert names(EnvCredentials.from_spec(f"{PREFIX}, WH_OTHER_KEY")) == [f"{PREFIX}_1", "WH_OTHER_KEY"]


@pytest.mark.parametrize("spec", ["", "A,,B", "1KEY", "KEY-NAME", "KEY NAME", " , "])
def test_bad_specs_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError):
        EnvCredentials.from_spec(spec)


def test_found_through_the_plugin_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(f"{PREFIX}_1", "sk-1")
    monkeypatch.setenv("WH_OTHER_KEY", "sk-o")
    manager = PluginManager()
    assert "env" in manager.names("credentials")
    pool = CredentialPool.from_specs([f"env:{PREFIX}", "env:WH_OTHER_KEY", f"env:{PREFIX}"], manager=manager)
    assert pool.names == [f"{PREFIX}_1", "WH_OTHER_KEY"]


def test_no_keys_at_all_is_a_credential_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CredentialError, match="no credentials found"):
        CredentialPool.from_specs([f"env:{PREFIX}"], manager=PluginManager())


# -- rate budgets ------------------------------------------------------------------------------
def test_name_rpm_tpm_tpd_variables_give_each_key_its_budget() -> None:
    from workhive.budgets import Budget

    env = {
        "KEY": "sk-0",
        "KEY_1": "sk-1",
        "KEY_2": "sk-2",
        "KEY_RPM": "500",
        "KEY_TPM": "200000",
        "KEY_RPM_2": "60",
        "KEY_TPD_2": "1e6",
    }
    budgets = {c.name: c.budget for c in EnvCredentials(["KEY"], environ=env).credentials()}
    assert budgets == {
        "KEY": Budget(rpm=500, tpm=200000),
        "KEY_1": Budget(rpm=500, tpm=200000),
        "KEY_2": Budget(rpm=60, tpm=200000, tpd=1e6),
    }
    assert EnvCredentials(["OTHER"], environ={"OTHER": "sk-x"}).credentials().__next__().budget is None


@pytest.mark.parametrize("value", ["0", "-10", "nan", "fast", ""])
def test_bad_budget_variables_are_config_errors_naming_the_variable(value: str) -> None:
    env = {"KEY": "sk-0", "KEY_1": "sk-1", "KEY_TPM_1": value}
    with pytest.raises(ConfigError, match=r"'KEY_1': budget tpm=.*KEY_TPM_1") as info:
        list(EnvCredentials(["KEY"], environ=env).credentials())
    assert "sk-" not in str(info.value)


def test_concurrency_variables_give_each_key_its_fleet_wide_in_flight_limit() -> None:
    from workhive.budgets import Budget

    env = {"KEY_1": "sk-1", "KEY_2": "sk-2", "KEY_CONCURRENCY": "8", "KEY_CONCURRENCY_2": "2", "KEY_RPM_2": "60"}
    budgets = {c.name: c.budget for c in EnvCredentials(["KEY"], environ=env).credentials()}
    assert budgets == {"KEY_1": Budget(concurrency=8), "KEY_2": Budget(rpm=60, concurrency=2)}


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "eight"])
def test_a_bad_concurrency_variable_names_the_variable_and_never_the_key(value: str) -> None:
    env = {"KEY_1": "sk-secret-1", "KEY_CONCURRENCY_1": value}
    with pytest.raises(ConfigError, match=r"'KEY_1': budget concurrency=.*KEY_CONCURRENCY_1") as info:
        list(EnvCredentials(["KEY"], environ=env).credentials())
    assert "sk-secret" not in str(info.value)
