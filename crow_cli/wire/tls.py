"""One TLS context per process, shared by every HTTP client crow makes.

httpx builds a new `ssl.SSLContext` for each client or transport made with `verify=True`, reading
certifi's CA bundle (or the SSL_CERT_FILE / SSL_CERT_DIR the environment names) every time: ~30 ms of CPU
apiece, paid even for a plain-HTTP local server. A context is made to be shared by connections, so crow
makes httpx's once and hands the same one to each client (`verify=ssl_context()`).
"""

from __future__ import annotations

import functools
import os
import ssl

import httpx

from ..errors import ConfigError

__all__ = ["ssl_context"]


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """The context httpx's `verify=True` gives (`httpx.create_ssl_context()`: certifi's roots, or the
    SSL_CERT_FILE / SSL_CERT_DIR of the environment as the process first reads it), made once.

    Raises:
        ConfigError: the certificates cannot be loaded (SSL_CERT_FILE names no file, or one without
            certificates; SSL_CERT_DIR, which counts when SSL_CERT_FILE is unset, names no folder that exists): one
            line naming the variable, not an error about something else.
    """
    folders = os.environ.get("SSL_CERT_DIR")  # OpenSSL's list (os.pathsep between folders), read at each handshake
    if folders and not os.environ.get("SSL_CERT_FILE") and not any(os.path.isdir(f) for f in folders.split(os.pathsep)):
        raise ConfigError(f"cannot load the TLS certificates of SSL_CERT_DIR={folders}: it names no folder")
    try:
        return httpx.create_ssl_context()
    except OSError as exc:  # ssl.SSLError is one
        named = next((f"{name}={os.environ[name]}" for name in ("SSL_CERT_FILE", "SSL_CERT_DIR")
                      if os.environ.get(name)), "certifi's bundle")
        raise ConfigError(f"cannot load the TLS certificates of {named}: "
                          f"{exc.strerror or getattr(exc, 'reason', None) or exc}") from None
