"""One error policy: `ReadIntoIOStream._fail` is the only place in the stream
and its core that logs an error and closes the stream with it."""

import ast
import pathlib

import tornado_readinto
from tornado_readinto import ReadIntoIOStream
from tornado_readinto.diagnostics.testing import stream_pair

from ..conftest import run, until


def _calls(module_name):
    """``(function, call source)`` for every call in a module of the package."""
    path = pathlib.Path(tornado_readinto.__file__).parent / f"{module_name.replace('.', '/')}.py"
    tree = ast.parse(path.read_text())
    found = []
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, ast.Call):
                    found.append((func.name, ast.unparse(node.func), node))
    return found


def test_error_policy_only_fail_closes_with_an_error():
    for module in ("face.iostream", "face._facecore", "core._streamcore", "core._readcore", "core._policy"):
        closers = {
            name
            for name, callee, call in _calls(module)
            if callee.endswith(".close") and (call.args or call.keywords)
            and not (call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value is False)
        }
        assert closers <= {"_fail"}, (module, closers)


def test_error_policy_only_fail_logs():
    for module in ("face.iostream", "face._facecore", "core._streamcore", "core._readcore", "core._policy"):
        loggers = {name for name, callee, _ in _calls(module) if callee.startswith("gen_log.")}
        # _dispatch_events' warning about an event for a closed stream closes
        # nothing (the body of Tornado's _handle_events; ours wraps it).
        assert loggers <= {"_fail", "_dispatch_events"}, (module, loggers)
        handle_events = [ast.unparse(call) for name, callee, call in _calls(module) if name == "_dispatch_events"]
        assert not [c for c in handle_events if c.startswith("gen_log.") and "closed stream" not in c]


class _RecordingFails(ReadIntoIOStream):
    """A face whose error policy records where each error came from."""

    def __init__(self, *args, **kwargs):
        self.failed_at = []
        super().__init__(*args, **kwargs)

    def _fail(self, error, where):
        self.failed_at.append((type(error).__name__, where))
        return super()._fail(error, where)


async def check_core_calls_a_subclass_policy():
    server, client = await stream_pair(_RecordingFails)
    try:
        # The core reaches the face through its class's FaceCalls, made from
        # the subclass's methods: a cancelled read closes the stream through
        # the subclass's _fail.
        reading = server.read_into(bytearray(8))
        reading.cancel()
        await until(server.closed)
        assert server.failed_at == [("CancelledError", "cancel")]
        assert server._core.calls is _RecordingFails._face_calls()
        assert ReadIntoIOStream._face_calls() is not server._core.calls
        assert ReadIntoIOStream._face_calls().plain_events and server._core.calls.plain_events
    finally:
        server.close()
        client.close()


def test_error_policy_core_calls_the_face_class_policy():
    run(check_core_calls_a_subclass_policy())
