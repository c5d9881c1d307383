"""Helpers for the two builds of the core (compiled and pure Python): the
tests that read a module's source read its ``.py``, which a compiled
module's ``__file__`` (the extension module) is not."""

from __future__ import annotations

import ast
import pathlib
from types import ModuleType


def source_path(module: ModuleType) -> pathlib.Path:
    """The ``.py`` file of ``module``, compiled or not."""
    assert module.__file__ is not None
    return pathlib.Path(module.__file__).parent / (module.__name__.rpartition(".")[2] + ".py")


def class_source(module: ModuleType, name: str) -> ast.ClassDef:
    """The ``class name`` statement of ``module``'s source."""
    tree = ast.parse(source_path(module).read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"no class {name} in {source_path(module)}")


def slots_and_methods(module: ModuleType, name: str) -> tuple[set[str], set[str]]:
    """``(__slots__, methods)`` of class ``name`` as written in ``module``'s
    source (a compiled class has neither a ``__slots__`` nor its ``cdef``
    methods in its ``__dict__``)."""
    slots: set[str] = set()
    methods: set[str] = set()
    for node in class_source(module, name).body:
        if isinstance(node, ast.FunctionDef):
            methods.add(node.name)
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__slots__" for t in node.targets):
            slots.update(ast.literal_eval(node.value))
    return slots, methods
