"""Installs from a copy of the checkout, into fresh virtual environments (the ``installs`` tox env).

Each command runs in a copy of the checkout of its own (the files git tracks,
plus new files not ignored), so a build never writes into the real checkout and
no command sees what another one built. Its environment is a fresh virtualenv
made with this interpreter. The workhive distributions come from the copy;
their third-party dependencies come from whatever index pip is configured with.
Without a reachable index the tests are skipped with the reason, except under
``WORKHIVE_REQUIRE_SERVICES=1`` (CI), where they fail.

The commands and the wheel build run side by side on a few threads
(``WORKHIVE_INSTALL_JOBS``, default 3): each is a pip process that mostly waits
for downloads and builds. A test waits for its own command's outcome only.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from readme_commands import CommandError, InstallCommand, Project, all_commands, expected_distributions, projects

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT = 1800.0  # seconds: bounds a hung pip, far above what an install takes on a loaded machine

# What a virtualenv's python reports about the distributions a command should have installed.
_PROBE = r"""
import importlib.metadata as md, json, sys
report = {}
for name in json.loads(sys.argv[1]):
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        report[name] = None
        continue
    direct = dist.read_text("direct_url.json")
    report[name] = {
        "version": dist.version,
        "direct_url": json.loads(direct) if direct else None,
        "entry_points": sorted(ep.name for ep in dist.entry_points if ep.group == "workhive"),
    }
print(json.dumps(report))
"""


def checkout_files() -> list[str]:
    """The checkout's files as a fresh clone of this tree would have them (relative paths)."""
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
        timeout=120,
    )
    if proc.returncode != 0:
        pytest.fail(f"tests/installs needs a git checkout to know its files: {proc.stderr.decode(errors='replace')}")
    names = [n.decode("utf-8", "surrogateescape") for n in proc.stdout.split(b"\0") if n]
    return sorted(n for n in names if (ROOT / n).is_file())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "wheels: needs the wheels built from a copy of the checkout")


FILES = checkout_files()
PROJECTS: dict[str, Project] = projects(ROOT, FILES)


def discovered() -> tuple[list[InstallCommand], str | None]:
    """Every command of the Markdown, or the reason they cannot be read."""
    try:
        return all_commands(ROOT, FILES), None
    except CommandError as exc:
        return [], str(exc)


def copy_checkout(dest: Path) -> Path:
    for name in FILES:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return dest


def clean_env() -> dict[str, str]:
    """This process's environment without what would steer pip or workhive away from a fresh install."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("WORKHIVE_") and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_USER")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(argv: list[str], cwd: Path, timeout: float = PIP_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout, check=False)


def make_venv(path: Path) -> Path:
    """A fresh virtual environment with pip; returns its python."""
    try:
        import virtualenv  # noqa: F401  # seeds pip from its cache: far quicker than ensurepip
    except ImportError:
        made = run([sys.executable, "-m", "venv", str(path)], cwd=path.parent)
    else:
        made = run([sys.executable, "-m", "virtualenv", "--quiet", str(path)], cwd=path.parent)
    assert made.returncode == 0, f"cannot make a virtualenv at {path}: {made.stdout}{made.stderr}"
    return path / "bin" / "python"


@dataclass
class Installed:
    """What one command did in its fresh environment."""

    command: InstallCommand
    checkout: Path
    pip: subprocess.CompletedProcess[str]
    report: dict[str, dict[str, Any] | None]
    plugins: subprocess.CompletedProcess[str] | None  # `workhive plugins --json`, when workhive is installed


def install(command: InstallCommand, workdir: Path) -> Installed:
    """Run ``command`` from a copy of the checkout into a fresh virtualenv, and look at the result."""
    checkout = copy_checkout(workdir / "checkout")
    python = make_venv(workdir / "venv")
    pip = run([str(python), "-m", "pip", "install", *command.argv], cwd=checkout)
    report: dict[str, dict[str, Any] | None] = {}
    plugins = None
    if pip.returncode == 0:
        names = sorted(expected_distributions(command, PROJECTS) | {p.name: None for p in PROJECTS.values()})
        probe = run([str(python), "-c", _PROBE, json.dumps(names)], cwd=workdir, timeout=300)
        assert probe.returncode == 0, probe.stderr
        report = json.loads(probe.stdout)
        if report.get("workhive"):
            plugins = run([str(python.parent / "workhive"), "plugins", "--json"], cwd=workdir, timeout=300)
    return Installed(command, checkout, pip, report, plugins)


@dataclass
class Wheels:
    """``pip wheel --no-deps`` over every distribution of a checkout copy."""

    checkout: Path
    outdir: Path
    pip: subprocess.CompletedProcess[str]


def build_wheels(workdir: Path) -> Wheels:
    checkout = copy_checkout(workdir / "checkout")
    outdir = workdir / "wheels"
    dirs = [str(checkout / path) for path in sorted(PROJECTS)]
    pip = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(outdir), *dirs], cwd=checkout)
    return Wheels(checkout, outdir, pip)


def index_problem() -> str | None:
    """None when pip can download from its configured index, else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="workhive-index-probe-") as tmp:
        proc = run([sys.executable, "-m", "pip", "download", "--no-deps", "--dest", tmp, "pluggy>=1.3"], Path(tmp), 300)
    if proc.returncode == 0:
        return None
    return f"pip cannot download from its index ({(proc.stderr or proc.stdout).strip()[-400:]})"


@dataclass
class Jobs:
    """The installs and the wheel build of this session, started together the first time a test needs one."""

    installs: dict[tuple[str, ...], concurrent.futures.Future[Installed]]
    wheels: concurrent.futures.Future[Wheels] | None


@pytest.fixture(scope="session")
def jobs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    problem = index_problem()
    if problem:
        if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{problem}; WORKHIVE_REQUIRE_SERVICES=1 requires it", pytrace=False)
        pytest.skip(problem)
    wanted: dict[tuple[str, ...], InstallCommand] = {}
    build = False
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        command = callspec.params.get("command") if callspec is not None else None
        if isinstance(command, InstallCommand) and not command.once_published:
            wanted.setdefault(tuple(command.argv), command)
        build = build or item.get_closest_marker("wheels") is not None
    workers = max(1, int(os.environ.get("WORKHIVE_INSTALL_JOBS", "3")))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="install") as pool:
        wheels = pool.submit(build_wheels, tmp_path_factory.mktemp("wheels")) if build else None
        installs = {
            key: pool.submit(install, command, tmp_path_factory.mktemp("install")) for key, command in wanted.items()
        }
        yield Jobs(installs, wheels)
