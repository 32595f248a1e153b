"""Run a callback right after a framework's import finishes: a `sys.meta_path` finder
that wraps the loaders of the modules it watches.

`auto_configure()` uses it when it cannot tell which framework a script uses: the
plan of each candidate is applied when the script imports it, before the script
builds a model, so TensorFlow's memory growth and the Keras policy still land
before TensorFlow initialises its GPUs, and no framework the script does not use
is ever imported.

Rules the hook keeps:

- it fires after the *outermost* watched import finishes: ``import keras`` imports
  tensorflow, and ``import tensorflow`` imports keras, inside it; the callback runs
  once both are whole;
- each group fires once (with ``first_only``, only those the first import made
  due); the callback never re-enters (imports it makes are not watched), and the
  hook takes itself off `sys.meta_path` once every group fired;
- it never breaks an import: an error inside the hook or the callback is logged and
  the module is returned unchanged; an error of the import itself passes through;
- `watch` replaces what an earlier call left waiting, so calling it again is harmless.
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

_log = logging.getLogger("accelkit")
_lock = threading.Lock()
_thread = threading.local()  # .depth: watched imports in progress; .firing: in a callback
_hook: _Hook | None = None

OnImport = Callable[[str, str], None]


def watch(
    groups: Mapping[str, tuple[str, ...]], on_import: OnImport, *, first_only: bool = False
) -> None:
    """Call ``on_import(group, trigger)`` once per group, right after the outermost
    import of a watched module finishes with the group's first module imported.

    Args:
        groups: group name -> the top-level modules it watches, the one that must
            be imported for the group to fire first (``{"tensorflow": ("tensorflow",
            "keras")}``).
        on_import: called with the group and the module whose import finished
            (``"keras"``); what it raises is logged, never raised.
        first_only: stop once the first import has fired (for the groups it made due).

    Example:
        >>> watch({"torch": ("torch",)}, lambda group, trigger: print(group, trigger))
        >>> # the script's first import of torch (skipped: this process may have one already)
        >>> import torch  # doctest: +SKIP
        torch torch
        >>> unwatch()
    """
    global _hook
    unwatch()
    hook = _Hook(dict(groups), on_import, first_only)
    with _lock:
        _hook = hook
        sys.meta_path.insert(0, hook)


def unwatch() -> None:
    """Take the hook off `sys.meta_path`, if it is there; nothing fires afterwards."""
    global _hook
    with _lock:
        hook, _hook = _hook, None
    if hook is not None:
        hook.remove()


def watching() -> tuple[str, ...]:
    """The groups still waiting for their import."""
    hook = _hook
    return () if hook is None else hook.pending()


class _Hook(importlib.abc.MetaPathFinder):
    def __init__(
        self, groups: dict[str, tuple[str, ...]], on_import: OnImport, first_only: bool = False
    ) -> None:
        self._groups = groups
        self._first_only = first_only
        self._modules = frozenset(m for modules in groups.values() for m in modules)
        self._on_import = on_import
        self._fired: set[str] = set()

    def pending(self) -> tuple[str, ...]:
        return tuple(g for g in self._groups if g not in self._fired)

    def remove(self) -> None:
        self._fired.update(self._groups)
        while self in sys.meta_path:
            try:
                sys.meta_path.remove(self)
            except ValueError:  # another thread removed it first
                break

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self._modules or getattr(_thread, "firing", False):
            return None
        try:
            spec = _spec_from_other_finders(self, fullname, path, target)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return None  # the import goes on as if the hook were not there
            spec.loader = _Loader(spec.loader, self, fullname)
            return spec
        except Exception:  # noqa: BLE001 - let the other finders answer as usual
            _log.debug("accelkit import hook: no spec for %s", fullname, exc_info=True)
            return None

    def finished(self, trigger: str) -> None:
        """The outermost watched import finished: run the callback of each group now due,
        and again for a group whose module a callback imported."""
        _thread.firing = True
        try:
            while due := self._take_due():
                for group in due:
                    try:
                        self._on_import(group, trigger)
                    except Exception as error:  # noqa: BLE001 - never break the user's import
                        _log.warning(
                            "accelkit could not configure %s when %s was imported: %s: %s",
                            group,
                            trigger,
                            type(error).__name__,
                            error,
                        )
        finally:
            _thread.firing = False

    def _take_due(self) -> list[str]:
        with _lock:
            due = [
                g
                for g, modules in self._groups.items()
                if g not in self._fired and sys.modules.get(modules[0]) is not None
            ]
            self._fired.update(due)
            if due and self._first_only:
                self._fired.update(self._groups)
            if not self.pending() and _hook is self:
                _clear(self)
            return due


def _clear(hook: _Hook) -> None:
    global _hook
    _hook = None
    hook.remove()


def _spec_from_other_finders(
    hook: _Hook, fullname: str, path: Any, target: ModuleType | None
) -> ModuleSpec | None:
    for finder in list(sys.meta_path):
        if finder is hook or isinstance(finder, _Hook):
            continue
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


class _Loader(importlib.abc.Loader):
    """The original loader, with `_Hook.finished` called after the outermost watched
    module is executed. Inside the module the original loader is all there is to see."""

    def __init__(self, loader: Any, hook: _Hook, name: str) -> None:
        self._loader = loader
        self._hook = hook
        self._name = name

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._restore(module)
        depth = getattr(_thread, "depth", 0)
        _thread.depth = depth + 1
        try:
            self._loader.exec_module(module)
        finally:
            _thread.depth = depth
        if depth == 0:
            try:
                self._hook.finished(self._name)
            except Exception:  # noqa: BLE001 - the module is imported whatever happens here
                _log.warning(
                    "accelkit import hook failed after importing %s", self._name, exc_info=True
                )

    def _restore(self, module: ModuleType) -> None:
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, get_resource_reader...
        return getattr(self._loader, name)
