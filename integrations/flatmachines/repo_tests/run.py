"""Run flatmachines' own distributed and work-pool tests, from a checkout of its repository, on workhive hives.

    python integrations/flatmachines/repo_tests/run.py /path/to/flatmachines-checkout
    python integrations/flatmachines/repo_tests/run.py CHECKOUT --engine sqlite --engine redis

CHECKOUT is a checkout of https://github.com/memgrafter/flatmachines at the
commit of the installed flatmachines version (for 1.0.0: e59ab1d, the last
commit before "Bump to 1.1.0"; for 4.2.1: 93497bb "Bump 4.2.1"). The test
files (``sdk/python/tests/integration/distributed/test_distributed.py``,
``sdk/python/tests/unit/test_work_pool.py`` where it exists) are copied
unchanged into a temporary directory beside ``conftest_template.py``, which
puts workhive-flatmachines backends in the place of flatmachines' own, and run
by pytest once per engine (memory, sqlite, postgres, redis by default; the
servers are ``WORKHIVE_POSTGRES_URL`` / ``WORKHIVE_REDIS_URL`` as for the
tests). Prints one line of counts per engine; exits 1 if any test failed or
errored. Nothing is written outside the temporary directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).parent
TESTS = HERE.parent / "tests"  # engines.py: a hive of its own per engine, and its clean-up
REPO_TESTS = ("sdk/python/tests/integration/distributed/test_distributed.py", "sdk/python/tests/unit/test_work_pool.py")
ENGINES = ("memory", "sqlite", "postgres", "redis")


def run_engine(files: list[Path], engine: str, work: Path) -> dict[str, int]:
    """Run the test files on one engine; the junit counts plus how many hives the stand-ins built."""
    run = work / engine
    (run / "scratch").mkdir(parents=True)
    for test in files:
        shutil.copy(test, run / test.name)
    shutil.copy(HERE / "conftest_template.py", run / "conftest.py")
    report = run / "report.xml"
    env = {
        **os.environ,
        "WHFM_ENGINE": engine,
        "WHFM_TMP": str(run / "scratch"),
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            ".",
            f"--junitxml={report}",
            *(test.name for test in files),
        ],
        cwd=run,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if not report.exists():
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
        return {"tests": 0, "failures": 0, "errors": 1, "skipped": 0, "hives": 0}
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    built = run / "scratch" / "hives-built"
    counts["hives"] = int(built.read_text()) if built.exists() else 0
    if counts["failures"] or counts["errors"]:
        print(done.stdout[-6000:], file=sys.stderr)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a checkout of the flatmachines repository")
    parser.add_argument("--engine", action="append", choices=ENGINES, help="default: all four")
    args = parser.parse_args(argv)
    files = [args.checkout / name for name in REPO_TESTS if (args.checkout / name).is_file()]
    if not files:
        parser.error(f"{args.checkout} has none of {', '.join(REPO_TESTS)}: is it a flatmachines checkout?")
    failed = False
    with tempfile.TemporaryDirectory(prefix="whfm-repo-tests-") as work:
        for engine in args.engine or ENGINES:
            c = run_engine(files, engine, Path(work))
            passed = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
            print(
                f"flatmachines {version('flatmachines')} repository tests ({', '.join(f.name for f in files)}) "
                f"on {engine}: {passed} passed, {c['failures']} failed, {c['errors']} errors, {c['skipped']} skipped "
                f"({c['hives']} hives built by the stand-ins)",
                flush=True,
            )
            failed |= bool(c["failures"] or c["errors"] or c["skipped"] or not c["tests"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
