"""The transport engine was retired: ``engine=`` and ``TORNADO_READINTO_ENGINE``
are accepted, ignored and warned about, never an error."""

import socket
import subprocess
import sys
import warnings

import pytest

from tornado_readinto import ReadIntoIOStream, iostream

from .conftest import run


@pytest.mark.parametrize("engine", ["selector", "transport", "auto", None, "bogus"])
def test_retired_engine_argument_is_ignored_with_a_deprecation_warning(engine):
    async def main():
        a, b = socket.socketpair()
        with pytest.warns(DeprecationWarning, match="engine=.* is ignored: the transport engine was retired"):
            server = ReadIntoIOStream(a, engine=engine)
        client = ReadIntoIOStream(b)
        try:
            assert not hasattr(server, "engine")
            client.write(b"ping")
            assert await server.read_bytes(4) == b"ping"  # an ordinary stream
        finally:
            server.close()
            client.close()

    run(main())


def test_retired_engine_not_given_no_warning(monkeypatch):
    monkeypatch.delenv(iostream.ENGINE_ENV_VAR, raising=False)

    async def main():
        a, b = socket.socketpair()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            streams = [ReadIntoIOStream(a), ReadIntoIOStream(b)]
        for stream in streams:
            stream.close()

    run(main())


def test_retired_engine_env_var_is_ignored_with_one_warning_per_process():
    code = """if True:
        import asyncio, socket, warnings
        from tornado_readinto import ReadIntoIOStream
        async def main():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                pairs = [socket.socketpair() for _ in range(3)]
                streams = [ReadIntoIOStream(s) for pair in pairs for s in pair]
                streams[1].write(b"x")
                got = await streams[0].read_bytes(1)
            for stream in streams:
                stream.close()
            messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
            print(got, len(messages), messages[0])
        asyncio.run(main())
    """
    env = {"TORNADO_READINTO_ENGINE": "transport", "PATH": ""}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "b'x' 1 TORNADO_READINTO_ENGINE is ignored: the transport engine was retired"
    )
