"""The model test's Hypothesis profiles load wherever a backend's tests import the suite."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import settings

from workhive.testing import stateful


def test_the_model_runs_derandomised_under_ci_whoever_registered_ci() -> None:
    ci = stateful.model_settings("ci", 75, 50)
    assert ci.derandomize is True and ci.database is None and ci.max_examples == 75
    assert stateful.model_settings("deep", 2000, 100).stateful_step_count == 100
    assert settings.get_profile("deep").deadline is None
    assert stateful.StorageStatefulContract.deep_max_examples > stateful.StorageStatefulContract.max_examples


def test_importing_the_suite_loads_the_profile_named_by_the_environment() -> None:
    # Compare the profile in force before and after the import: Hypothesis itself loads a
    # profile of its own when it detects a CI environment, so an absolute value would test
    # the machine, not the suite.
    code = (
        "from hypothesis import settings; before = repr(settings.default); "
        "import workhive.testing.stateful; "
        "print(settings.default.derandomize, settings.default.database is None, repr(settings.default) == before)"
    )
    env = dict(os.environ, HYPOTHESIS_PROFILE="ci")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    derandomize, no_database, _ = out.stdout.split()
    assert (derandomize, no_database) == ("True", "True")
    env["HYPOTHESIS_PROFILE"] = "a-profile-of-the-projects-own"  # not ours: left to the project, no error
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[2] == "True", "importing the suite changed a profile it does not own"
