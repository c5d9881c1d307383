"""tornado_readinto.wire.addressing: the pure address helpers shared by the comm
layer and the dask backend (no event loop, no sockets)."""

import subprocess
import sys

import pytest

from tornado_readinto.wire.addressing import (
    COMM_SCHEMES,
    contact_host,
    parse_address,
    parse_host_port,
    sockaddr_to_address,
    unparse_host_port,
)


@pytest.mark.parametrize(
    "address, expected",
    [
        ("tcp://127.0.0.1:8786", ("tcp", "127.0.0.1:8786")),
        ("tls://[::1]:1", ("tls", "[::1]:1")),
        ("unix:///tmp/s.sock", ("unix", "/tmp/s.sock")),
        ("tcp://", ("tcp", "")),  # a host:port problem, found by parse_host_port
    ],
)
def test_parse_address_splits_scheme_and_location(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize(
    "address, match",
    [
        ("127.0.0.1:80", "no scheme"),
        ("http://x:80", "unknown scheme 'http'"),
        ("unix://", "no path"),
        ("readinto://h:1", "unknown scheme"),
    ],
)
def test_parse_address_refuses(address, match):
    with pytest.raises(ValueError, match=match):
        parse_address(address)


def test_parse_address_other_schemes_and_type():
    assert parse_address("readinto://h:1", schemes=("readinto",)) == ("readinto", "h:1")
    assert COMM_SCHEMES == ("tcp", "tls", "unix")
    with pytest.raises(TypeError, match="must be a str, not tuple"):
        parse_address(("h", 1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "loc, default_port, expected",
    [
        ("127.0.0.1:8786", None, ("127.0.0.1", 8786)),
        ("example.com:0", None, ("example.com", 0)),
        ("[::1]:65535", None, ("::1", 65535)),
        ("[fe80::1%eth0]:1", None, ("fe80::1%eth0", 1)),
        (":8786", None, ("", 8786)),  # all interfaces
        ("host", 0, ("host", 0)),
        ("[::1]", 7, ("::1", 7)),
        ("", 5, ("", 5)),
    ],
)
def test_parse_host_port(loc, default_port, expected):
    assert parse_host_port(loc, default_port) == expected


@pytest.mark.parametrize(
    "loc, match",
    [
        ("host", "has no port"),
        ("::1:80", "needs brackets"),
        ("[::1:80", "invalid address"),
        ("[::1]80", "invalid address"),
        ("h:http", "invalid port 'http'"),
        ("h:65536", "port 65536 out of range"),
        ("h:-1", "port -1 out of range"),
    ],
)
def test_parse_host_port_refuses(loc, match):
    with pytest.raises(ValueError, match=match):
        parse_host_port(loc)


def test_parse_host_port_names_the_whole_address():
    with pytest.raises(ValueError, match="'tcp://h:x'"):
        parse_host_port("h:x", address="tcp://h:x")


@pytest.mark.parametrize(
    "host, port, expected",
    [
        ("127.0.0.1", 8786, "127.0.0.1:8786"),
        ("::1", 8786, "[::1]:8786"),
        ("[::1]", 8786, "[::1]:8786"),  # already bracketed
        ("::1", None, "[::1]"),
        ("example.com", None, "example.com"),
    ],
)
def test_unparse_host_port(host, port, expected):
    assert unparse_host_port(host, port) == expected


@pytest.mark.parametrize("loc", ["127.0.0.1:1", "[::1]:65535", "h:0"])
def test_unparse_inverts_parse(loc):
    assert unparse_host_port(*parse_host_port(loc)) == loc


@pytest.mark.parametrize(
    "prefix, sockaddr, expected",
    [
        ("tcp://", ("127.0.0.1", 40123), "tcp://127.0.0.1:40123"),
        ("readinto://", ("::1", 5, 0, 0), "readinto://[::1]:5"),  # AF_INET6: 4-tuple
        ("unix://", "/tmp/s", "unix:///tmp/s"),
        ("unix://", b"\x00abstract", "unix://\x00abstract"),  # Linux abstract namespace
        ("unix://", "", "unix://"),  # an unnamed socket
        ("unix://", None, "unix://"),
    ],
)
def test_sockaddr_to_address(prefix, sockaddr, expected):
    assert sockaddr_to_address(prefix, sockaddr) == expected


def test_contact_host_replaces_wildcards_only():
    assert contact_host("0.0.0.0") == "127.0.0.1"
    assert contact_host("::") == "::1"
    assert contact_host("10.1.2.3") == "10.1.2.3"
    assert contact_host("::1") == "::1"


def test_addressing_imports_no_tornado_and_no_socket():
    code = (
        "import sys\n"
        "for name in ('tornado', 'socket', 'msgpack', 'distributed'):\n"
        "    sys.modules[name] = None\n"
        "from tornado_readinto.wire.addressing import parse_address, parse_host_port\n"
        "assert parse_host_port(parse_address('tcp://[::1]:2')[1]) == ('::1', 2)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
