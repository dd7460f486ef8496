"""Facts learned about an endpoint, remembered per base URL and model, read by later runs.

A small JSON file, `facts.json` in the platformdirs user state dir (`~/.local/state/crow/` on Linux),
mode 0600:

    {"http://127.0.0.1:8080/v1 smollm2": {"tool_calling": true, "context_window": 4096,
                                          "quirks": ["index-always-0"], "reasoning_echo": "all"}}

Written by `crow probe` and by the client when a server refuses a field and the resent request is
accepted, so the next run does not pay the failed request again; shown by `crow probe --show`.
Keys are `"PUBLIC_BASE_URL MODEL"`: the base URL without credentials or query string
(`text.public_url`); no key is ever stored. An unreadable or corrupt file counts as empty and is
replaced on the next write; a write that fails is skipped (facts are an optimisation, never a
reason to fail a run).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..private import private_dir, private_file
from ..text import public_url

__all__ = ["facts_path", "learn", "recall", "recall_all"]


def facts_path() -> Path:
    """The facts file (it may not exist yet)."""
    import platformdirs

    return Path(platformdirs.user_state_dir("crow", appauthor=False)) / "facts.json"


def endpoint_key(base_url: str, model: str) -> str:
    """`"PUBLIC_BASE_URL MODEL"`: how an endpoint is named in the file (no credentials, no query)."""
    return f"{public_url(base_url).rstrip('/')} {model}"


_NAMES = ("refused_fields", "required_fields", "quirks")
"""Facts that are lists of names: other items are left out."""
_TYPES: dict[str, tuple[type, ...]] = {"request_rules": (list,), "tool_message_name": (bool,), "tool_calling": (bool,),
                                       "usage_option_refused": (bool,), "context_window": (int,),
                                       "reasoning_echo": (str, type(None))}
"""The type of each other fact crow reads: a value of another type (a file edited by hand, another version) is
left out, as if not known."""


def _checked(record: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in record.items():
        if key in _NAMES:
            if isinstance(value, list):
                out[key] = [v for v in value if isinstance(v, str)]
        elif key not in _TYPES or (isinstance(value, _TYPES[key])
                                   and not (isinstance(value, bool) and bool not in _TYPES[key])):
            out[key] = value
    return out


def recall_all() -> dict[str, dict[str, Any]]:
    """Every remembered endpoint: `"BASE_URL MODEL"` -> facts ({} when there are none); values of the wrong
    type are left out."""
    try:
        data = json.loads(facts_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: _checked(v) for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def recall(base_url: str, model: str) -> dict[str, Any]:
    """The facts remembered for this endpoint and model; {} when nothing is known."""
    return dict(recall_all().get(endpoint_key(base_url, model)) or {})


def learn(base_url: str, model: str, **facts: Any) -> None:
    """Merge `facts` (JSON values) into this endpoint's record and write the file atomically (0600).

    Never raises for the file system: an OSError (read-only home, full disk) is ignored.
    """
    if not facts:
        return
    try:
        data = recall_all()
        key = endpoint_key(base_url, model)
        record = dict(data.get(key) or {})
        if all(k in record and record[k] == v for k, v in facts.items()):
            return  # nothing new: no write
        record.update(facts)
        data[key] = record
        path = facts_path()
        private_dir(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        private_file(tmp)
        try:
            tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError:
        pass
