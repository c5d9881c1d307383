"""Run Tornado's own test modules against this package's entry points.

`mirror` subclasses every test case an upstream module defines, with a mixin
(`UpstreamGuard`) that, for the duration of each test:

* rebinds names in the upstream module (``TCPServer``, ``TCPClient``,
  ``websocket_connect``…) to ours, and calls `tornado_readinto.install` when
  asked to;
* swaps the stock stream classes that Tornado's *factories* use
  (``tornado.tcpserver.IOStream``/``SSLIOStream``,
  ``tornado.tcpclient.IOStream``) for recording subclasses, so that a stream
  built by a stock server or client fails the test;
* counts the `ReadIntoIOStream`\\ s built, per upstream module and loop;
* runs the test on the event loop it was mirrored for (`mirror_everywhere`:
  both loops): Tornado makes each test's loop with
  ``asyncio.new_event_loop()``, which `OnLoop` points at the loop's own
  factory for the length of the test (no event loop policy: deprecated
  since Python 3.14).

Upstream modules are imported as modules (never their classes into our
namespace), so pytest does not collect the stock tests a second time.
Tornado's "abstract base" test classes (skipped upstream) are not mirrored.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import unittest
import unittest.mock

import tornado.tcpclient
import tornado.tcpserver
from tornado.iostream import IOStream, SSLIOStream

import tornado_readinto
from tornado_readinto import ReadIntoIOStream

#: upstream module name -> ReadIntoIOStream instances built while its tests ran
BUILT = collections.Counter()
#: (upstream module name, loop) -> ReadIntoIOStreams built on that loop
BUILT_ON = collections.Counter()

#: The loops `mirror_everywhere` runs each suite on, with the suffix of the
#: mirrored class names.
EVERYWHERE = (
    ("asyncio", ""),
    ("uvloop", "_uvloop"),
)

_STOCK_FACTORY_GLOBALS = (
    (tornado.tcpserver, "IOStream", IOStream),
    (tornado.tcpserver, "SSLIOStream", SSLIOStream),
    (tornado.tcpclient, "IOStream", IOStream),
)


class OnLoop:
    """Mixin: runs a Tornado test case on the event loop named by ``loop``
    (``"asyncio"`` or ``"uvloop"``); the test fails if its loop is not the
    one named.

    Tornado makes each test's loop, and any other `IOLoop` a test makes,
    with ``asyncio.new_event_loop()`` (``AsyncIOLoop.initialize``); for
    uvloop that is ``uvloop.new_event_loop`` from setUp to tearDown.  Not
    through an event loop policy (``asyncio.set_event_loop_policy`` is
    deprecated since Python 3.14), nor by overriding
    ``AsyncTestCase.get_new_ioloop`` (deprecated since Tornado 6.3: its
    setUp warns)."""

    loop = "asyncio"

    def setUp(self):
        self._loop_factory = None
        if self.loop == "uvloop":
            import uvloop

            self._loop_factory = unittest.mock.patch.object(asyncio, "new_event_loop", uvloop.new_event_loop)
            self._loop_factory.start()
        try:
            super().setUp()
            io_loop = getattr(self, "io_loop", None)
            if io_loop is not None:
                assert (type(io_loop.asyncio_loop).__module__.split(".")[0] == "uvloop") == (self.loop == "uvloop")
        except BaseException:
            self._stop_loop_factory()
            raise

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            self._stop_loop_factory()

    def _stop_loop_factory(self):
        if self._loop_factory is not None:
            self._loop_factory.stop()
            self._loop_factory = None


class UpstreamGuard(OnLoop):
    """Mixin for a mirrored upstream TestCase (see the module docstring)."""

    upstream_module = None  # set by mirror()
    upstream_patches: dict = {}  # name in the upstream module -> replacement
    use_install = False

    def setUp(self):
        self._undo = []
        self._stock_streams = []
        self._env = unittest.mock.patch.dict(os.environ)
        self._env.start()
        module = self.upstream_module
        for name, value in self.upstream_patches.items():
            if not hasattr(module, name):
                continue  # an older Tornado's suite does not use that name
            self._undo.append((module, name, getattr(module, name)))
            setattr(module, name, value)
        for mod, name, cls in _STOCK_FACTORY_GLOBALS:
            self._undo.append((mod, name, getattr(mod, name)))
            setattr(mod, name, self._recording(cls, f"{mod.__name__}.{name}"))
        init = ReadIntoIOStream.__init__
        self._undo.append((ReadIntoIOStream, "__init__", init))
        key = module.__name__

        def counting_init(stream, *args, **kwargs):
            BUILT[key] += 1
            init(stream, *args, **kwargs)
            BUILT_ON[key, self.loop] += 1

        ReadIntoIOStream.__init__ = counting_init
        # Importing dask.distributed (other test modules do) sets the
        # "tornado" logger to CRITICAL; upstream ExpectLog tests need it.
        logger = logging.getLogger("tornado")
        self._log_level = logger.level
        logger.setLevel(logging.NOTSET)
        if self.use_install:
            tornado_readinto.install()
        try:
            super().setUp()  # OnLoop: the loop
        except BaseException:
            self._restore()
            raise

    def _recording(self, cls, where):
        built = self._stock_streams

        class Recording(cls):
            def __init__(self, *args, **kwargs):
                built.append(where)
                super().__init__(*args, **kwargs)

        return Recording

    def _restore(self):
        self._env.stop()
        if self.use_install:
            tornado_readinto.uninstall()
        for obj, name, value in reversed(self._undo):
            setattr(obj, name, value)
        self._undo = []
        logging.getLogger("tornado").setLevel(self._log_level)

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            self._restore()
        assert not self._stock_streams, f"stock streams built by Tornado's factories: {self._stock_streams}"


def upstream_test_cases(module):
    """The test case classes that ``module`` defines (not imported ones, not
    abstract bases), in definition order."""
    return [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, unittest.TestCase) and obj.__module__ == module.__name__
    ]


def mirror(
    module,
    namespace,
    *,
    patches=None,
    use_install=False,
    overrides=None,
    loop="asyncio",
    suffix="",
    only=None,
):
    """Define in ``namespace`` a guarded subclass of each test case of
    ``module``; ``overrides`` maps an upstream class name to a dict of extra
    class attributes (e.g. a replaced method).  The tests run on ``loop``;
    ``suffix`` ends the new class names.  Returns the new classes.
    ``only``: the names of the upstream classes to mirror (default: all)."""
    made = []
    for cls in upstream_test_cases(module):
        if only is not None and cls.__name__ not in only:
            continue
        name = cls.__name__ + suffix
        if name in namespace:  # e.g. MaxHeaderSizeTest in two upstream modules
            name = f"{name}_{module.__name__.rsplit('.', 1)[-1]}"
        assert name not in namespace, name
        attrs = dict(
            upstream_module=module,
            upstream_patches=dict(patches or {}),
            use_install=use_install,
            loop=loop,
            __module__=namespace["__name__"],
            __qualname__=name,
        )
        attrs.update((overrides or {}).get(cls.__name__, {}))
        new = type(name, (UpstreamGuard, cls), attrs)
        namespace[name] = new
        made.append(new)
    return made


def mirror_everywhere(module, namespace, **kwargs):
    """`mirror` ``module`` once per event loop (`EVERYWHERE`).
    Returns the new classes."""
    made = []
    for loop, suffix in EVERYWHERE:
        made += mirror(module, namespace, loop=loop, suffix=suffix, **kwargs)
    return made


def check_built(module):
    """Assert that ``module``'s mirrored tests built our streams, on each loop."""
    assert BUILT[module.__name__] > 0, module.__name__
    for loop, _ in EVERYWHERE:
        assert BUILT_ON[module.__name__, loop] > 0, (module.__name__, loop)
