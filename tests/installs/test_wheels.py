"""Every distribution of the repository builds a valid wheel that carries its code, data and entry points.

One ``pip wheel --no-deps`` over a copy of the checkout builds them all
(``conftest.py``); each is then read as an installer would read it: the
RECORD's hashes and sizes, the metadata against pyproject.toml (name,
version, dependencies and extras), the entry points against pyproject.toml,
and every file the checkout has in the distribution's packages.
"""

from __future__ import annotations

import base64
import configparser
import csv
import fnmatch
import hashlib
import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from readme_commands import Project

from conftest import FILES, PROJECTS, Jobs

pytestmark = pytest.mark.wheels


def wheel_of(project: Project, outdir: Path) -> Path:
    stem = project.name.replace("-", "_")
    found = sorted(outdir.glob(f"{stem}-{project.version}-*.whl"))
    assert len(found) == 1, f"expected one wheel of {project.name} {project.version} in {sorted(outdir.iterdir())}"
    return found[0]


def packages_of(project: Project) -> dict[str, str]:
    """Top-level import package -> its directory in the checkout, as setuptools' find config selects them."""
    tool: Any = project.data.get("tool", {})
    find = tool.get("setuptools", {}).get("packages", {}).get("find", {})
    where = find.get("where", ["."])
    include = find.get("include", ["*"])
    found: dict[str, str] = {}
    prefix = "" if project.path == "." else project.path + "/"
    for base in where:
        base_prefix = prefix + ("" if base == "." else base.rstrip("/") + "/")
        for name in FILES:
            if not name.startswith(base_prefix) or not name.endswith("/__init__.py"):
                continue
            parts = name[len(base_prefix) :].split("/")
            if len(parts) == 2 and any(fnmatch.fnmatch(parts[0], pattern) for pattern in include):
                found[parts[0]] = base_prefix + parts[0]
    return found


def entry_points_of(project: Project) -> dict[str, dict[str, str]]:
    table: Any = project.data["project"]
    groups = {group: dict(points) for group, points in table.get("entry-points", {}).items()}
    if table.get("scripts"):
        groups["console_scripts"] = dict(table["scripts"])
    return groups


def requirements_of(project: Project) -> set[str]:
    table: Any = project.data["project"]
    wanted = {str(Requirement(text)) for text in table.get("dependencies", [])}
    for extra, texts in table.get("optional-dependencies", {}).items():
        for text in texts:
            req = Requirement(text)
            marker = f"({req.marker}) and extra == {extra!r}" if req.marker else f"extra == {extra!r}"
            wanted.add(str(Requirement(f"{str(req).split(';')[0]}; {marker}")))
    return wanted


@pytest.fixture(scope="module")
def outdir(jobs: Jobs) -> Path:
    assert jobs.wheels is not None
    built = jobs.wheels.result()
    assert built.pip.returncode == 0, f"pip wheel failed:\n{built.pip.stdout[-3000:]}\n{built.pip.stderr[-3000:]}"
    return built.outdir


def test_every_distribution_and_nothing_else_is_built(outdir: Path) -> None:
    assert {p.name for p in PROJECTS.values()} >= {"workhive", "workhive-sqlite", "workhive-postgres"}
    built = sorted(w.name for w in outdir.glob("*.whl"))
    assert len(built) == len(PROJECTS), built


@pytest.mark.parametrize("path", sorted(PROJECTS), ids=[PROJECTS[p].name for p in sorted(PROJECTS)])
def test_the_wheel_is_valid_and_carries_the_distribution(path: str, outdir: Path) -> None:
    project = PROJECTS[path]
    wheel = wheel_of(project, outdir)
    with zipfile.ZipFile(wheel) as archive:
        assert archive.testzip() is None, f"{wheel.name}: a member fails its CRC"
        names = set(archive.namelist())
        info = f"{project.name.replace('-', '_')}-{project.version}.dist-info"
        for required in ("METADATA", "WHEEL", "RECORD"):
            assert f"{info}/{required}" in names, f"{wheel.name} has no {info}/{required}"

        # RECORD: every member listed once, with its sha256 and size (RECORD itself unhashed).
        rows = list(csv.reader(io.StringIO(archive.read(f"{info}/RECORD").decode())))
        recorded = {row[0]: row for row in rows}
        assert set(recorded) == names, f"{wheel.name}: RECORD and the archive differ: {set(recorded) ^ names}"
        for name, (_, digest, size) in recorded.items():
            if name == f"{info}/RECORD":
                continue
            data = archive.read(name)
            expected = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, size) == (expected, str(len(data))), f"{wheel.name}: {name} does not match RECORD"

        wheel_meta = archive.read(f"{info}/WHEEL").decode()
        assert "Root-Is-Purelib: true" in wheel_meta and "Tag: py3-none-any" in wheel_meta, wheel_meta

        metadata = archive.read(f"{info}/METADATA").decode().split("\n\n", 1)[0].splitlines()
        fields: dict[str, list[str]] = {}
        for line in metadata:
            key, _, value = line.partition(": ")
            fields.setdefault(key, []).append(value)
        assert canonicalize_name(fields["Name"][0]) == project.name
        assert fields["Version"] == [project.version]
        shipped = {str(Requirement(text)) for text in fields.get("Requires-Dist", [])}
        assert shipped == requirements_of(project), f"{wheel.name}: Requires-Dist differs from pyproject.toml"
        assert set(fields.get("Provides-Extra", [])) == set(project.extras)

        # Entry points: exactly pyproject's, each pointing at a module the wheel carries.
        groups = entry_points_of(project)
        if groups:
            parser = configparser.ConfigParser(delimiters=("=",))
            parser.optionxform = str  # type: ignore[assignment,method-assign]  # entry-point names keep their case
            parser.read_string(archive.read(f"{info}/entry_points.txt").decode())
            got = {section: {k: v.strip() for k, v in parser[section].items()} for section in parser.sections()}
            assert got == groups, f"{wheel.name}: entry points differ from pyproject.toml"
            for points in groups.values():
                for value in points.values():
                    module = value.split(":")[0].strip().replace(".", "/")
                    assert {f"{module}.py", f"{module}/__init__.py"} & names, f"{wheel.name} lacks {value}"

        # Every file the checkout has in the distribution's packages (code, py.typed, SQL, Lua, static).
        packages = packages_of(project)
        assert packages, f"{project.name}: no package found for it in the checkout"
        for package, source in packages.items():
            missing = [
                name for name in FILES if name.startswith(source + "/") and package + name[len(source) :] not in names
            ]
            assert not missing, f"{wheel.name} lacks {missing}"
        tops = {name.split("/")[0] for name in names if not name.startswith(info)}
        assert tops <= set(packages), f"{wheel.name} carries more than its packages: {sorted(tops - set(packages))}"
