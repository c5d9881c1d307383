"""tornado_readinto.face._net: the socket side shared by the comm layer and the
dask backend (real sockets on 127.0.0.1 and Unix sockets)."""

import os
import socket
import ssl
import sys

import pytest

from tornado_readinto import CommClosedError, ReadIntoIOStream, ReadIntoTCPServer
from tornado_readinto.face._net import (
    bind_unix_socket,
    check_encryption,
    listen_tcp,
    open_stream,
    set_tcp_keepalive,
    unlink_unix_socket,
)

from ..conftest import run

# -- check_encryption -----------------------------------------------------------------


def test_check_encryption_accepts_matching_settings():
    ctx = ssl.create_default_context()
    check_encryption("tls://h:1", tls=True, tls_scheme="tls", ssl_context=ctx, require_encryption=True)
    check_encryption("tcp://h:1", tls=False, tls_scheme="tls", ssl_context=None, require_encryption=False)
    # distributed hands its context to every scheme: the dask backend ignores it on plain TCP
    check_encryption(
        "readinto://h:1",
        tls=False,
        tls_scheme="readinto-tls",
        ssl_context=ctx,
        require_encryption=False,
        refuse_unused_context=False,
    )


def test_check_encryption_refusals_and_their_types():
    ctx = ssl.create_default_context()
    with pytest.raises(ValueError, match="require_encryption=True refuses tcp://h:1; use a tls:// address"):
        check_encryption("tcp://h:1", tls=False, tls_scheme="tls", ssl_context=None, require_encryption=True)
    with pytest.raises(RuntimeError, match="encryption required.*readinto-tls://"):
        check_encryption(
            "readinto://h:1",
            tls=False,
            tls_scheme="readinto-tls",
            ssl_context=None,
            require_encryption=True,
            encryption_error=RuntimeError,
        )
    with pytest.raises(ValueError, match="tls://h:1 needs an ssl_context .* got None"):
        check_encryption("tls://h:1", tls=True, tls_scheme="tls", ssl_context=None, require_encryption=False)
    with pytest.raises(TypeError, match="needs an ssl_context argument of type ssl.SSLContext, got {}"):
        check_encryption(
            "readinto-tls://h:1", tls=True, tls_scheme="readinto-tls", ssl_context={}, require_encryption=False,
            context_error=TypeError,
        )  # fmt: skip
    with pytest.raises(ValueError, match="ssl_context given for tcp://h:1"):
        check_encryption("tcp://h:1", tls=False, tls_scheme="tls", ssl_context=ctx, require_encryption=False)


# -- listening and connecting -------------------------------------------------------------


class _Greeter(ReadIntoTCPServer):
    async def handle_stream(self, stream, address):
        await stream.write(b"hi")
        stream.close()


def test_listen_tcp_binds_hands_sockets_to_the_server_and_prefers_ipv4():
    async def main():
        server = _Greeter()
        try:
            host, port = listen_tcp(server, "", 0, 16)  # all interfaces: IPv4 and, if any, IPv6
            assert host == "0.0.0.0" and port > 0
            stream = await open_stream("tcp", f"127.0.0.1:{port}", f"tcp://127.0.0.1:{port}")
            assert type(stream) is ReadIntoIOStream
            assert stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert await stream.read_bytes(2) == b"hi"
            stream.close()
        finally:
            server.stop()

    run(main())


def test_open_stream_refused_names_the_address():
    async def main():
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with pytest.raises(CommClosedError, match=f"cannot connect to tcp://127.0.0.1:{port}: ConnectionRefusedError"):
            await open_stream("tcp", f"127.0.0.1:{port}", f"tcp://127.0.0.1:{port}")

    run(main())


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets")
def test_unlink_unix_socket_removes_only_its_own_file(tmp_path):
    path = str(tmp_path / "s")
    first, first_id = bind_unix_socket(path, 16)
    assert os.stat(path).st_mode & 0o777 == 0o600
    first.close()
    os.rename(path, path + ".old")  # (keeps the inode in use, so the next file gets another)
    second, second_id = bind_unix_socket(path, 16)  # another server took the path since
    try:
        assert second_id != first_id
        unlink_unix_socket(path, first_id)
        assert os.path.exists(path)  # not ours any more: left alone
        unlink_unix_socket(path, second_id)
        assert not os.path.exists(path)
        unlink_unix_socket(path, second_id)  # gone already: no error
    finally:
        second.close()


# -- socket options -------------------------------------------------------------------------


def test_set_tcp_keepalive_options():
    with socket.socket() as sock:
        set_tcp_keepalive(sock, 0)  # off: nothing set
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
        set_tcp_keepalive(sock, 30)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 15  # half idle
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 3  # 5 probes over the rest
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 5
        if sys.platform.startswith("linux"):
            # Not set: it aborts healthy connections after zero-window episodes
            # (docs/reliability.rst, "Dead peers").
            assert sock.getsockopt(socket.IPPROTO_TCP, 18) == 0  # TCP_USER_TIMEOUT
