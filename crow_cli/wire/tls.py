"""One TLS context per process, shared by every HTTP client crow makes.

httpx builds a new `ssl.SSLContext` for each client or transport made with `verify=True`, reading
certifi's CA bundle (or the SSL_CERT_FILE / SSL_CERT_DIR the environment names) every time: ~30 ms of CPU
apiece, paid even for a plain-HTTP local server. A context is made to be shared by connections, so crow
makes httpx's once and hands the same one to each client (`verify=ssl_context()`).
"""

from __future__ import annotations

import functools
import ssl

import httpx

__all__ = ["ssl_context"]


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """The context httpx's `verify=True` gives (`httpx.create_ssl_context()`: certifi's roots, or the
    SSL_CERT_FILE / SSL_CERT_DIR of the environment as the process first reads it), made once."""
    return httpx.create_ssl_context()
