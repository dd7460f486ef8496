"""The proxy the environment names for a URL (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY).

httpx reads these variables only for a client it builds its own transport for, and crow's chat client
brings its transport (`body.CappedErrorBodies`, the recorder). So every client crow makes asks here and is
given the proxy (with `trust_env=False` where httpx would read the variables again): one reading, one
error for a proxy crow cannot use. The variables are read by the standard library
(`urllib.request.getproxies`, `proxy_bypass`), as requests reads them; a value without a scheme means
`http://`, as httpx reads it.
"""

from __future__ import annotations

import importlib.util
import urllib.parse
import urllib.request

from ..errors import ConfigError
from ..text import public_url

__all__ = ["proxy_for", "through"]

SCHEMES = ("http", "https", "socks5", "socks5h")
"""The proxy schemes httpx speaks (SOCKS with its `socks` extra)."""

UNUSABLE = (f"is not a proxy URL crow can use ({', '.join(s + '://' for s in SCHEMES)}, a host and, if any, "
            "a port number)")


def proxy_for(url: str) -> str | None:
    """The proxy URL for requests to `url` (`http://proxy:3128`), or None: none is set for its scheme (nor
    ALL_PROXY), or NO_PROXY names its host. Reads the environment only (no import of httpx: a client
    asks when it is made, before the run starts); a proxy without a port has its scheme's (httpx's default).

    Raises:
        ConfigError: the proxy named is none httpx can use (an unknown scheme, no host, a port that is no
            number; SOCKS without the socksio package); the line shows it without credentials.
    """
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    proxy = proxy if "://" in proxy else f"http://{proxy}"
    try:
        given = urllib.parse.urlsplit(proxy)
        given.port  # noqa: B018 - raises ValueError for a port out of range or not a number
        named = (f"the proxy for {parts.scheme}:// URLs ({public_url(proxy)}, from HTTPS_PROXY, HTTP_PROXY or "
                 "ALL_PROXY)")
    except ValueError:  # an unreadable host or port: nothing of it is shown
        raise ConfigError(f"the proxy set in HTTPS_PROXY, HTTP_PROXY or ALL_PROXY {UNUSABLE}") from None
    scheme = given.scheme.lower()
    if scheme not in SCHEMES or not given.hostname or any(c.isspace() for c in proxy):
        raise ConfigError(f"{named} {UNUSABLE}")
    if scheme.startswith("socks") and importlib.util.find_spec("socksio") is None:
        raise ConfigError(f"{named} is a SOCKS proxy, which needs httpx's SOCKS support: "
                          "pip install 'httpx[socks]'")
    return proxy


def through(proxy: str | None) -> str:
    """What an error that could not reach a server adds about the proxy it went through (`proxy_for`'s
    answer): `" through the proxy http://proxy:3128 (HTTPS_PROXY, …)"`, without credentials; "" for None."""
    return f" through the proxy {public_url(proxy)} (HTTPS_PROXY, HTTP_PROXY or ALL_PROXY)" if proxy else ""
