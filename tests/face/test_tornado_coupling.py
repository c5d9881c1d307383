"""How this package is coupled to Tornado, checked: the stream and its core
import no HTTP module, every body copied from Tornado still matches the
installed Tornado's, and the package uses at most 20 private names of
Tornado's stream classes."""

import ast
import inspect
import io
import pathlib
import subprocess
import sys
import textwrap
import tokenize

import pytest
import tornado
import tornado.iostream

import tornado_readinto
from tornado_readinto import ReadIntoIOStream, SSLReadIntoIOStream
from tornado_readinto.core import _readcore, _streamcore
from tornado_readinto.core._readcore import ReadCore
from tornado_readinto.core._streamcore import StreamCore
from tornado_readinto.face import _facecore, _tornado_compat
from tornado_readinto.face._facecore import FaceCore

from .._builds import slots_and_methods

_core_modules = {"FaceCore": _facecore, "StreamCore": _streamcore, "ReadCore": _readcore}

#: Modules that the stream's core and its Tornado face must not import.
HTTP_MODULES = ("tornado.web", "tornado.httpserver", "tornado.simple_httpclient", "tornado.httputil")


@pytest.mark.parametrize(
    "module",
    [
        "tornado_readinto.core._readcore",
        "tornado_readinto.core._policy",
        "tornado_readinto.core._streamcore",
        "tornado_readinto.face._facecore",
        "tornado_readinto.face.iostream",
    ],
)
def test_coupling_the_stream_imports_no_http_module(module):
    code = f"import sys, {module}; print(sorted(m for m in {HTTP_MODULES!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"{module} imported {result.stdout.strip()}"


# -- bodies copied from Tornado --------------------------------------------------


def test_coupling_copied_tornado_bodies_are_unchanged():
    """Each body copied from Tornado records a digest of the source it was
    copied from; the installed Tornado must still have that source."""
    if not _tornado_compat.copied_bodies_recorded():
        pytest.skip(f"no digests recorded for tornado {tornado.version}: re-check every copy in COPIED_BODIES")
    problems = _tornado_compat.check_copied_bodies()
    assert not problems, "\n".join(problems)


def test_coupling_an_edited_tornado_body_names_the_copy_to_recheck():
    installed = _tornado_compat.tornado_source

    def edited(qualname):
        source = installed(qualname)
        if qualname == "BaseIOStream.close":
            source = source.replace("self._closed = True", "self._closed = True\n            self._extra = 1")
        elif qualname == "IOStream.start_tls":
            # A comment and a blank line are not a change of the code.
            source = source.replace("socket = self.socket", "socket = self.socket  # a comment\n")
        return source

    problems = _tornado_compat.check_copied_bodies(edited)
    assert len(problems) == 1, problems
    assert "changed BaseIOStream.close" in problems[0] and "re-check ReadIntoIOStream.close" in problems[0]


def test_coupling_source_digest_ignores_docstring_comments_and_layout():
    digest = _tornado_compat.source_digest
    plain = "def f(self, x):\n    return g(x, 1)\n"
    assert digest(plain) == digest('def f(self, x):\n    """Doc."""\n    # why\n    return g(\n        x, 1)  # c\n')
    assert digest("    " + plain.replace("\n    ", "\n        ")) == digest(plain)  # a method's indentation
    assert digest(plain) != digest(plain.replace("1", "2"))


def test_coupling_every_copy_is_a_method_of_ours():
    classes = {
        "ReadIntoIOStream": ReadIntoIOStream,
        "SSLReadIntoIOStream": SSLReadIntoIOStream,
        "FaceCore": FaceCore,
        "StreamCore": StreamCore,
        "ReadCore": ReadCore,
    }
    for ours, theirs, digests in _tornado_compat.COPIED_BODIES:
        cls, name = ours.split(".")
        # (a compiled core's cdef methods are not in its class's __dict__)
        source_methods = slots_and_methods(_core_modules[cls], cls)[1] if cls in _core_modules else set()
        assert name in vars(classes[cls]) or name in source_methods, ours
        assert _tornado_compat.tornado_source(theirs)  # exists in the installed Tornado
        assert set(digests) == {"6.5", "6.6"}, ours


# -- how many of Tornado's private stream names the package uses -------------------

#: The most distinct private names of Tornado's stream classes the package may
#: use (issue #32: 31 before the stream became a face over one core).
MAX_PRIVATE_TORNADO_NAMES = 20


def tornado_stream_private_names():
    """Private names of Tornado's stream classes: the class attributes of
    ``BaseIOStream``, ``IOStream`` and ``SSLIOStream``, the instance
    attributes their methods assign (``self._x = ...``), and the private
    module-level names that ``tornado.iostream`` itself defines."""
    names = set()
    classes = (tornado.iostream.BaseIOStream, tornado.iostream.IOStream, tornado.iostream.SSLIOStream)
    for cls in classes:
        names.update(name for name in vars(cls) if _private(name))
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    names.add(node.attr)
    module = ast.parse(inspect.getsource(tornado.iostream))
    for node in module.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node] if hasattr(node, "name") else []
        for target in targets:
            name = getattr(target, "id", None) or getattr(target, "name", None)
            if name and _private(name):
                names.add(name)
    return names


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def private_tornado_names_used():
    """``{name: [module, ...]}``: each private name of Tornado's stream
    classes that appears as a name (not in a string or a comment) in the
    package's source."""
    names = tornado_stream_private_names()
    used = {}
    for path in sorted(pathlib.Path(tornado_readinto.__file__).parent.rglob("*.py")):
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type == tokenize.NAME and token.string in names:
                used.setdefault(token.string, set()).add(path.name)
    return {name: sorted(modules) for name, modules in sorted(used.items())}


def test_coupling_at_most_20_private_tornado_names():
    used = private_tornado_names_used()
    assert len(used) <= MAX_PRIVATE_TORNADO_NAMES, "\n".join(f"{name}: {', '.join(m)}" for name, m in used.items())
    # dask.distributed's compatibility stays: it appends to _write_buffer and
    # bumps _total_write_index, then calls write(b"").
    assert {"_write_buffer", "_total_write_index"} <= set(used)
    # Retired seams of Tornado's read path.
    assert not {"_find_read_pos", "_read_to_buffer_loop", "_finish_read", "_try_inline_read"} & set(used)


def test_coupling_every_listed_tornado_name_is_used():
    """No dead entries: each private attribute and hook that _tornado_compat
    lists is a name in the package's code (not only in that list)."""
    package = pathlib.Path(tornado_readinto.__file__).parent
    names = set()
    for path in package.rglob("*.py"):
        if path.name != "_tornado_compat.py":
            tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
            names.update(token.string for token in tokens if token.type == tokenize.NAME)
    listed = (
        _tornado_compat.PRIVATE_STREAM_ATTRS
        + _tornado_compat.PRIVATE_STREAM_HOOKS
        + _tornado_compat.PRIVATE_SSL_STREAM_HOOKS
    )
    assert [name for name in listed if name not in names] == []
