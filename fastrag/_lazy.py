"""Lazy package exports (PEP 562): a name loads its module on first use, not when the package is imported.

A package lists ``{name: module}`` and installs the two hooks this module builds::

    __getattr__, __dir__ = lazy_exports(__name__, {"SQLiteVectorStore": "fastrag.vector_store.sqlite"})

so ``from package import SQLiteVectorStore`` imports ``fastrag.vector_store.sqlite`` then, and nothing else.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` for ``exports`` (``{name: module}``).

    ``__getattr__(name)`` imports ``exports[name]``, takes ``name`` from it, stores it in the package's
    namespace (later lookups never call the hook again) and returns it; an unknown name raises
    ``AttributeError`` as Python's own lookup would, so ``from package import submodule`` still imports
    the submodule. ``__dir__()`` lists the package's namespace and every export.

    Args:
        package: the package's ``__name__`` (already in ``sys.modules``).
        exports: each exported name and the module that defines it.

    Raises:
        ImportError: (from ``__getattr__``) the module cannot be imported; whatever its import raises.
    """
    namespace = vars(sys.modules[package])
    table = dict(exports)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
