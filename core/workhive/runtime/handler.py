"""Loading the user's handler from ``"package.module:function"`` and calling it.

A handler takes one argument, the ``HandlerContext``, and returns a
JSON-serialisable result (kept with the item) or None. ``async def``
handlers are awaited on the worker's event loop; plain functions run in the
process's thread pool so a blocking HTTP call never stalls heartbeats.

>>> handler = load_handler("json:dumps")
>>> handler.is_async
False
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import sys
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from typing import Any

import attrs

from workhive.errors import ConfigError

__all__ = ["Handler", "load_handler"]


@attrs.frozen
class Handler:
    """A loaded handler: the callable, where it came from, and how to call it."""

    spec: str
    function: Callable[..., Any]
    is_async: bool

    async def __call__(self, context: Any, executor: Executor | None = None) -> Any:
        """Run the handler for one item and return its result."""
        if self.is_async:
            return await self.function(context)
        loop = asyncio.get_running_loop()
        # In the caller's contextvars: the handler's own spans are children of the item's (workhive.tracing).
        result = await loop.run_in_executor(executor, partial(contextvars.copy_context().run, self.function, context))
        if inspect.isawaitable(result):  # a plain function that returned a coroutine: await it here
            result = await result
        return result


def _is_async(function: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(function):
        return True
    call = getattr(function, "__call__", None)  # noqa: B004 - instances with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def load_handler(spec: str) -> Handler:
    """Import ``"package.module:function"`` and return it as a ``Handler``.

    ``function`` may be a dotted attribute path (``module:Class.method``).
    Raises ``ConfigError`` saying what was wrong: a malformed spec, a module
    that cannot be imported (with the import error), a missing attribute (with
    the names the module has), or something that is not callable.
    """
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ConfigError(
            f"handler {spec!r} must look like 'package.module:function' (one colon between module and function)"
        )
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ConfigError(f"handler {spec!r} must name both a module and a function: 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                f"handler {spec!r}: no module named {exc.name!r} (is it installed, or is its directory on "
                f"PYTHONPATH? the current directory is {'' if '' in sys.path else 'not '}on sys.path)"
            ) from None
        raise ConfigError(f"handler {spec!r}: importing module {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        raise ConfigError(
            f"handler {spec!r}: importing module {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            public = sorted(n for n in dir(target) if not n.startswith("_") and callable(getattr(target, n, None)))
            shown = ", ".join(public[:20]) + (", …" if len(public) > 20 else "")
            raise ConfigError(
                f"handler {spec!r}: {module_name!r} has no attribute {attr_path!r}"
                + (f"; callables there: {shown}" if shown else "")
            ) from None
    if not callable(target):
        raise ConfigError(
            f"handler {spec!r}: {attr_path!r} is a {type(target).__name__}, not a function; "
            "point --handler at a function taking the item context"
        )
    _check_signature(spec, target)
    return Handler(spec=spec, function=target, is_async=_is_async(target))


def _check_signature(spec: str, function: Callable[..., Any]) -> None:
    """``ConfigError`` unless ``function`` can be called with one positional argument (the context)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # some builtins have no signature to read: they are called and fail (or not) per item
    try:
        signature.bind(object())
    except TypeError:
        raise ConfigError(
            f"handler {spec!r} has the signature {signature}, but it is called with one argument, "
            "the item's context: define it as `def handler(ctx):` (or give the other parameters defaults)"
        ) from None
