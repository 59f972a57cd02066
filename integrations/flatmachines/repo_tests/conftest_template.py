"""conftest for flatmachines' repository tests, copied beside them by run.py: flatmachines' backends become hives.

flatmachines' distributed and work-pool tests build ``MemoryWorkBackend()``,
``SQLiteWorkBackend(db_path=…)``, the registration twins, and the factories
``create_work_backend`` / ``create_registration_backend``, by name from
``flatmachines``, ``flatmachines.distributed`` and (4.x) ``flatmachines.work``.
This file replaces those names, before the tests are imported, by stand-ins
that take the same arguments and return workhive-flatmachines backends on the
engine named by ``WHFM_ENGINE``: a memory backend is a fresh hive, as
flatmachines' is a fresh store; backends given one ``db_path`` share one hive,
as flatmachines' share one file. The same stand-in object goes in every
module, so the tests' re-export checks (``distributed.X is work.X``) hold.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path
from typing import Any

from engines import Place

from workhive_flatmachines import WorkhiveRegistrationBackend, WorkhiveWorkBackend, WorkhiveWorkPool

ENGINE = os.environ["WHFM_ENGINE"]
_places: list[Place] = []
_by_path: dict[str, Place] = {}


def _place(db_path: str | None) -> Place:
    if db_path is None:
        place = Place(ENGINE, Path(tempfile.mkdtemp(dir=os.environ["WHFM_TMP"])))
        _places.append(place)
        return place
    key = str(Path(db_path).resolve())
    if key not in _by_path:
        _by_path[key] = Place(ENGINE, Path(key).parent)
        _places.append(_by_path[key])
    return _by_path[key]


class HiveMemoryWorkBackend(WorkhiveWorkBackend):
    def __init__(self) -> None:
        place = _place(None)
        super().__init__(place.url, **place.options)


class HiveSQLiteWorkBackend(WorkhiveWorkBackend):
    def __init__(self, db_path: str = "workers.sqlite") -> None:
        place = _place(db_path)
        super().__init__(place.url, **place.options)


class HiveMemoryRegistrationBackend(WorkhiveRegistrationBackend):
    def __init__(self) -> None:
        place = _place(None)
        super().__init__(place.url, **place.options)


class HiveSQLiteRegistrationBackend(WorkhiveRegistrationBackend):
    def __init__(self, db_path: str = "workers.sqlite") -> None:
        place = _place(db_path)
        super().__init__(place.url, **place.options)


def create_work_backend(backend_type: str = "memory", **kwargs: Any) -> WorkhiveWorkBackend:
    if backend_type == "memory":
        return HiveMemoryWorkBackend()
    if backend_type == "sqlite":
        return HiveSQLiteWorkBackend(db_path=kwargs.get("db_path", "workers.sqlite"))
    raise ValueError(f"Unknown work backend type: {backend_type}")


def create_registration_backend(backend_type: str = "memory", **kwargs: Any) -> WorkhiveRegistrationBackend:
    if backend_type == "memory":
        return HiveMemoryRegistrationBackend()
    if backend_type == "sqlite":
        return HiveSQLiteRegistrationBackend(db_path=kwargs.get("db_path", "workers.sqlite"))
    raise ValueError(f"Unknown registration backend type: {backend_type}")


STAND_INS = {
    "MemoryWorkBackend": HiveMemoryWorkBackend,
    "SQLiteWorkBackend": HiveSQLiteWorkBackend,
    "MemoryRegistrationBackend": HiveMemoryRegistrationBackend,
    "SQLiteRegistrationBackend": HiveSQLiteRegistrationBackend,
    "MemoryWorkPool": WorkhiveWorkPool,
    "SQLiteWorkPool": WorkhiveWorkPool,
    "create_work_backend": create_work_backend,
    "create_registration_backend": create_registration_backend,
}

for module_name in ("flatmachines", "flatmachines.distributed", "flatmachines.work"):
    try:
        module = importlib.import_module(module_name)
    except ImportError:  # flatmachines 1.x has no flatmachines.work
        continue
    for name, stand_in in STAND_INS.items():
        if hasattr(module, name):
            setattr(module, name, stand_in)


def pytest_sessionfinish() -> None:
    (Path(os.environ["WHFM_TMP"]) / "hives-built").write_text(str(len(_places)))
    for place in _places:
        place.clean()
