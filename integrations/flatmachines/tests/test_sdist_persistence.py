"""flatmachines' own persistence tests, from the sdist on the package index, against the hive-backed persistence.

The sdist of the installed flatmachines (4.2.1 in the ``flatmachines-fm4``
env) is downloaded at test time with pip, never vendored; its
``flatmachines/tests/test_persistence*.py`` are extracted, unchanged, into a
temporary package beside ``sdist_conftest.py``, which puts
``WorkhivePersistence`` in the place of flatmachines' three backends, and run
by pytest in a process of their own on each engine.

Deselected, with the reason: the tests that read flatmachines' backends'
private insides rather than the ``PersistenceBackend`` API — ``MemoryBackend._store``
(filled and measured directly), ``SQLiteCheckpointBackend._conn`` with SQL on
its ``machine_checkpoints`` table, ``LocalFileBackend.base_dir`` directories.
No other backend has those; what they check (prune of populated stores,
created_at kept verbatim) is checked through the API in test_checkpoints.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from engines import ENGINES, require
from fmversion import FLATMACHINES, MAJOR

HERE = Path(__file__).parent

#: node ids (relative to the package) that use a flatmachines backend's private attributes
PRIVATE_INSIDES = [
    "tests/test_persistence.py::TestSQLiteCheckpointCreatedAt",  # backend._conn + SQL on its table
    "tests/test_persistence_prune.py::TestPruneMemoryBackendMaxCount::test_removes_all_when_max_count_zero",
    "tests/test_persistence_prune.py::TestPruneMemoryBackendMaxCount::test_removes_none_when_max_count_ge_count",
    "tests/test_persistence_prune.py::TestPruneMemoryBackendAge",  # filled through backend._store
    "tests/test_persistence_prune.py::TestPruneMemoryBackendCombined",
    "tests/test_persistence_prune.py::TestPruneMemoryBackendEdgeCases",
    "tests/test_persistence_prune.py::TestPruneLocalFileBackend::test_prune_age_removes_old",  # base_dir paths
]
#: tests that use a substituted backend through its API; all of them must run and pass
THROUGH_THE_BACKEND = 7

pytestmark = pytest.mark.skipif(
    MAJOR < 4, reason=f"flatmachines {FLATMACHINES}: its sdist ships no tests (the 4.x sdists ship persistence tests)"
)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extracted sdist of the installed flatmachines version, downloaded once for this module."""
    where = tmp_path_factory.mktemp("sdist")
    spec = f"flatmachines=={FLATMACHINES}"
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", spec, "-d", str(where)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    archives = list(where.glob("flatmachines-*.tar.gz"))
    if got.returncode != 0 or not archives:
        why = f"pip could not download the {spec} sdist: {got.stderr.strip()[-500:]}"
        if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    with tarfile.open(archives[0]) as archive:
        archive.extractall(where, filter="data")
    return where / f"flatmachines-{FLATMACHINES}"


def lay_out(sdist: Path, run: Path) -> Path:
    """A package ``fmsdist`` holding the sdist's persistence tests unchanged and the substituting conftest."""
    package = run / "fmsdist"
    (package / "tests").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tests" / "__init__.py").write_text("")
    shutil.copy(HERE / "sdist_conftest.py", package / "conftest.py")
    tests = sorted((sdist / "flatmachines" / "tests").glob("test_persistence*.py"))
    assert tests, f"the sdist at {sdist} has no flatmachines/tests/test_persistence*.py"
    for test in tests:
        shutil.copy(test, package / "tests" / test.name)
    return package


@pytest.mark.parametrize("engine", ENGINES)
def test_flatmachines_sdist_persistence_tests_pass_on_the_hive(sdist: Path, tmp_path: Path, engine: str) -> None:
    require(engine)
    package = lay_out(sdist, tmp_path / "run")
    report = tmp_path / "report.xml"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {
        **os.environ,
        "WHFM_ENGINE": engine,
        "WHFM_TMP": str(scratch),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    deselect = [arg for node in PRIVATE_INSIDES for arg in ("--deselect", f"fmsdist/{node}")]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={report}",
            "--rootdir",
            ".",
            "fmsdist/tests",
            *deselect,
        ],
        cwd=package.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["failures"] == counts["errors"] == counts["skipped"] == 0, counts
    cases = [case.get("classname", "") + "::" + case.get("name", "") for case in suite.iter("testcase")]
    backend_cases = [c for c in cases if "TestPrune" in c and "Select" not in c]
    assert len(backend_cases) == THROUGH_THE_BACKEND, backend_cases
    assert int((scratch / "hives-built").read_text()) >= THROUGH_THE_BACKEND  # they ran on hives, not on files
    print(f"flatmachines {FLATMACHINES} sdist persistence tests on {engine}: {counts['tests']} passed")
