"""Package attributes imported on first use (PEP 562), for packages whose own import must stay cheap.

>>> __getattr__ = lazy_attributes("workhive.runtime", {"run_fleet": "workhive.runtime.fleet"})  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name in ``homes`` is imported from its module on first use.

    The value is then set on the package, so later lookups find it directly; any other name
    raises ``AttributeError`` as a missing attribute does.
    """

    def __getattr__(name: str) -> Any:
        module = homes.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # found directly from now on
        return value

    return __getattr__
