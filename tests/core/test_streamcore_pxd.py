"""The ``.pxd`` files that type the core for Cython's pure-Python mode
declare exactly the fields and methods the ``.py`` modules have (no
compiler needed to check that they did not drift apart)."""

import re

import pytest

from tornado_readinto.core import _policy, _readcore, _sockcalls, _streamcore, writebuffer
from tornado_readinto.face import _facecore
from tornado_readinto.wire import framing

from .._builds import slots_and_methods, source_path

_DECLARATION = re.compile(r"^\s+(cdef|cpdef)\s+(?:(?:public|readonly)\s+)?[\w ]*?\b(\w+)\s*(\(|#|$)", re.M)


def declarations(module, name):
    """``(fields, methods)`` declared for class ``name`` in ``module``'s ``.pxd``."""
    text = source_path(module).with_suffix(".pxd").read_text()
    body = text.split(f"cdef class {name}", 1)[1].split("\ncdef class", 1)[0]
    fields, methods = set(), set()
    for match in _DECLARATION.finditer(body):
        (methods if match.group(3) == "(" else fields).add(match.group(2))
    return fields, methods


@pytest.mark.parametrize(
    "module, cls",
    [
        (_policy, _policy.LowWaterMark),
        (_policy, _policy.StreamPolicy),
        (_sockcalls, _sockcalls.SocketCalls),
        (_readcore, _readcore.ReadCore),
        (_readcore, _readcore.ReadAheadPool),
        (_streamcore, _streamcore.StreamCore),
        (_facecore, _facecore.FaceCore),
        (writebuffer, writebuffer.ChunkedWriteBuffer),
        (framing, framing.FrameReader),
    ],
)
def test_pxd_declares_every_slot_and_its_methods_exist(module, cls):
    fields, methods = declarations(module, cls.__name__)
    slots, defined = slots_and_methods(module, cls.__name__)  # the source, whichever build runs
    assert fields == slots
    # Every declared method exists (undeclared ones stay Python methods).
    assert methods <= defined, methods - defined
