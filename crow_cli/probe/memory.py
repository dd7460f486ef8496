"""What `crow probe` learned about an endpoint, remembered per base URL and model.

A small JSON file, `probe.json` in the platformdirs user state dir (`~/.local/state/crow/` on Linux):

    {"http://127.0.0.1:8080/v1 smollm2": {"probed_at": "2026-11-30T13:00:00Z", "tool_calling": true,
                                          "usage_option_refused": false, "context_window": 4096,
                                          "quirks": ["index-always-0"], "reasoning_echo": null}}

Base URLs are stored without credentials or query string (`text.public_url`); no key is ever stored.
An unreadable or corrupt file counts as empty and is replaced on the next write.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..text import public_url

__all__ = ["memory_path", "recall", "recall_all", "remember"]


def memory_path() -> Path:
    """The facts file (it may not exist yet)."""
    import platformdirs

    return Path(platformdirs.user_state_dir("crow", appauthor=False)) / "probe.json"


def _key(base_url: str, model: str) -> str:
    return f"{public_url(base_url.rstrip('/'))} {model}"


def recall_all() -> dict[str, dict[str, Any]]:
    """Every remembered endpoint: `"BASE_URL MODEL"` -> facts."""
    try:
        data = json.loads(memory_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def recall(base_url: str, model: str) -> dict[str, Any] | None:
    """The facts remembered for this endpoint and model, or None."""
    return recall_all().get(_key(base_url, model))


def remember(base_url: str, model: str, facts: dict[str, Any]) -> Path:
    """Store `facts` (JSON values) for this endpoint and model, with the time; return the file.

    Raises:
        OSError: the state folder cannot be written.
    """
    data = recall_all()
    data[_key(base_url, model)] = {"probed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **facts}
    path = memory_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path

