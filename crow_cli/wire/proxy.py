"""The proxy the environment names for a URL (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY).

httpx reads these variables only for a client it builds its own transport for; crow's chat client brings
its transport (`body.CappedErrorBodies`, the recorder), so it asks here and gives the transport the proxy
itself, as `crow models`, the probe and the context-window lookup get it from httpx. The variables are
read by the standard library (`urllib.request.getproxies`, `proxy_bypass`), as requests reads them.
"""

from __future__ import annotations

import urllib.parse
import urllib.request

__all__ = ["proxy_for"]


def proxy_for(url: str) -> str | None:
    """The proxy URL for requests to `url` (`http://proxy:3128`), or None: none is set for its scheme (nor
    ALL_PROXY), or NO_PROXY names its host."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return proxy
