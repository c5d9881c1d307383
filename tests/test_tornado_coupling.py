"""How this package is coupled to Tornado, checked: the stream and its core
import no HTTP module."""

import subprocess
import sys

import pytest

#: Modules that the stream's core and its Tornado face must not import.
HTTP_MODULES = ("tornado.web", "tornado.httpserver", "tornado.simple_httpclient", "tornado.httputil")


@pytest.mark.parametrize("module", ["tornado_readinto._readcore", "tornado_readinto.iostream"])
def test_coupling_the_stream_imports_no_http_module(module):
    code = f"import sys, {module}; print(sorted(m for m in {HTTP_MODULES!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"{module} imported {result.stdout.strip()}"
