"""The proxy the environment names for a URL (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY).

httpx reads these variables only for a client it builds its own transport for; crow's chat client brings
its transport (`body.CappedErrorBodies`, the recorder), so it asks here and gives the transport the proxy
itself, as `crow models`, the probe and the context-window lookup get it from httpx. The variables are
read by the standard library (`urllib.request.getproxies`, `proxy_bypass`), as requests reads them; a
value without a scheme means `http://`, as httpx reads it.
"""

from __future__ import annotations

import importlib.util
import urllib.parse
import urllib.request

import httpx

from ..errors import ConfigError
from ..text import public_url

__all__ = ["proxy_for"]


def proxy_for(url: str) -> str | None:
    """The proxy URL for requests to `url` (`http://proxy:3128`), or None: none is set for its scheme (nor
    ALL_PROXY), or NO_PROXY names its host.

    Raises:
        ConfigError: the proxy named is no proxy URL httpx can use (an unknown scheme; SOCKS without the
            socksio package); the line shows it without credentials.
    """
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    proxy = proxy if "://" in proxy else f"http://{proxy}"
    named = f"the proxy for {parts.scheme}:// URLs ({_shown(proxy)}, from HTTPS_PROXY, HTTP_PROXY or ALL_PROXY)"
    try:
        scheme = httpx.Proxy(proxy).url.scheme
    except (ValueError, TypeError, httpx.InvalidURL):  # its message may hold the proxy's user name
        raise ConfigError(f"{named} is not a proxy URL httpx can use (http://, https://, socks5:// or "
                          "socks5h://, a host and a port number)") from None
    if scheme.startswith("socks") and importlib.util.find_spec("socksio") is None:
        raise ConfigError(f"{named} is a SOCKS proxy, which needs httpx's SOCKS support: "
                          "pip install 'httpx[socks]'")
    return proxy


def _shown(proxy: str) -> str:
    try:
        return public_url(proxy)
    except ValueError:  # a port that is no number
        return "unreadable"
