"""TLS for the benchmark processes (``--tls`` of ``benchmarks.load``).

The orchestrator makes a throwaway CA and a certificate for the server's
address (127.0.0.1, or its veth address with ``--netpath``) signed by it
(trustme, ECDSA keys) for each case, as two PEM files in a temporary
directory; the server process loads the certificate and its key, the client
process trusts the CA and checks the certificate's name, as a real client
does.  Both sides keep the default context settings of ``ssl``: TLS 1.2 or
newer, the default ciphers (TLS 1.3 and AES-GCM on current OpenSSL).
"""

from __future__ import annotations

import os
import ssl

from ._async import HOST

#: What the load benchmark needs for ``--tls``: trustme (in the ``bench``
#: extra) to make its certificates.
TLS_REQUIRES = ("trustme",)


def unavailable() -> str | None:
    """None if certificates can be made here, else why not."""
    for module in TLS_REQUIRES:
        try:
            __import__(module)
        except ImportError as exc:
            return f"--tls needs {module} for its throwaway certificates ({exc}; pip install -e '.[bench]')"
    return None


def write_cert_files(directory: str, host: str = HOST) -> tuple[str, str]:
    """A fresh CA, and a certificate for ``host`` (an IP address) that it
    signed, as PEM files in ``directory``.

    :returns: ``(cert_file, ca_file)``: the certificate chain with its private
        key (for `server_context`), and the CA certificate (for `client_context`).
    :raises ImportError: without trustme.
    """
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert(host)
    cert_file, ca_file = os.path.join(directory, "server.pem"), os.path.join(directory, "ca.pem")
    cert.private_key_and_cert_chain_pem.write_to_path(cert_file)
    ca.cert_pem.write_to_path(ca_file)
    return cert_file, ca_file


def server_context(cert_file: str) -> ssl.SSLContext:
    """The server's context: the default server settings, the certificate
    and key of ``cert_file`` (from `write_cert_files`)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file)
    return context


def client_context(ca_file: str) -> ssl.SSLContext:
    """The client's context: the default client settings (certificate and
    host name verified) trusting only the CA of ``ca_file``."""
    return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
