"""Facts learned about an endpoint, remembered per base URL and model, read by later runs.

A small JSON file, `facts.json` in the platformdirs user state dir (`~/.local/state/crow/` on Linux),
mode 0600:

    {"http://127.0.0.1:8080/v1 smollm2": {"tool_calling": true, "context_window": 4096,
                                          "quirks": ["index-always-0"], "reasoning_echo": "all"}}

Written by `crow probe` and by the client when a server refuses a field and the resent request is
accepted, so the next run does not pay the failed request again; shown by `crow probe --show`.
Keys are `"PUBLIC_BASE_URL MODEL"`: the base URL without credentials or query string
(`text.public_url`); no key is ever stored. Each record carries `learned_at` (Unix seconds) and
`why` (the refusal it was learned from, cut short); records older than `MAX_AGE` count as not known.

Learned facts come from servers, so nothing in them is trusted: a fixed schema (`_NAMES`, `_TYPES`,
`request_rules` of bounded names and scalar values), bounded lengths and counts, and a file larger
than `MAX_FILE`, not JSON or nested too deep counts as empty (`problem()` says so once per read) and
is replaced on the next write. Writers hold an exclusive lock on the directory for their
read-merge-write, so runs learning at once keep every fact. A write that fails is skipped (facts
are an optimisation, never a reason to fail a run).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..atomic import NotRegularFile, write_atomic
from ..private import private_dir
from ..text import public_url
from .adapt import SIZED_OPS, is_size

__all__ = ["MAX_AGE", "facts_path", "forget", "learn", "problem", "recall", "recall_all"]


def facts_path() -> Path:
    """The facts file (it may not exist yet)."""
    import platformdirs

    return Path(platformdirs.user_state_dir("crow", appauthor=False)) / "facts.json"


def endpoint_key(base_url: str, model: str) -> str:
    """`"PUBLIC_BASE_URL MODEL"`: how an endpoint is named in the file (no credentials, no query)."""
    return f"{public_url(base_url).rstrip('/')} {model}"


MAX_AGE = 30 * 24 * 3600.0
_SKEW_S = 3600.0
"""How far in the future a record's `learned_at` may be (a clock set back, rounding): later, it is not known."""
"""Seconds a record is trusted after it was last learned (30 days): older ones count as not known and are
learned again, so a server that changed is not held to what it once refused."""
MAX_FILE = 1 << 20
"""Bytes read of the file at most: a larger one counts as damaged."""
MAX_ENDPOINTS = 256
"""Endpoints kept; the oldest are dropped beyond this."""
MAX_ITEMS = 32
"""Items of a list fact (names, rules) kept."""
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""A field, parameter or quirk name: what real servers name, bounded."""
_NAMES = ("refused_fields", "required_fields", "quirks")
"""Facts that are lists of names: other items are left out."""
_TYPES: dict[str, tuple[type, ...]] = {"tool_message_name": (bool,), "tool_calling": (bool,),
                                       "usage_option_refused": (bool,), "context_window": (int,),
                                       "reasoning_echo": (str, type(None)), "learned_at": (int, float),
                                       "probed_at": (str,), "images": (bool,),
                                       "why": (str,)}
"""The type of each other fact crow reads: a value of another type (a file edited by hand, another version) is
left out, as if not known; a key not named here or in `_NAMES` / `request_rules` / `tool_call_id_rule` is left
out too."""

_problem: str | None = None


def problem() -> str | None:
    """Why the last read of the file found it damaged (one line), or None when it was fine or absent."""
    return _problem


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 64)


def _rule(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict) or set(item) - {"op", "target", "value"}:
        return None
    op, target, value = item.get("op"), item.get("target", ""), item.get("value")
    if not isinstance(op, str) or not _NAME.fullmatch(op) or not isinstance(target, str) \
            or not (target == "" or _NAME.fullmatch(target)) or not _scalar(value) \
            or (op in SIZED_OPS and not is_size(value)):  # a cap or limit: a positive size, or not known
        return None
    return {"op": op, "target": target, "value": value}


def _checked(record: dict[str, Any]) -> dict[str, Any]:
    """`record` as crow reads it: known keys of the right type and bounded size only."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in _NAMES:
            if isinstance(value, list):
                out[key] = [v for v in value[:MAX_ITEMS] if isinstance(v, str) and _NAME.fullmatch(v)]
        elif key == "request_rules":
            if isinstance(value, list):
                out[key] = [r for r in map(_rule, value[:MAX_ITEMS]) if r is not None]
        elif key == "tool_call_id_rule":  # the id shape a reader demands (`outgoing`): two bounded scalars
            if isinstance(value, dict) and not set(value) - {"chars", "length"} and all(map(_scalar, value.values())):
                out[key] = dict(value)
        elif key in _TYPES and isinstance(value, _TYPES[key]) \
                and not (isinstance(value, bool) and bool not in _TYPES[key]):
            if isinstance(value, str) and len(value) > 200:
                value = value[:200]
            if key == "context_window" and not 0 < value < 1 << 31:
                continue
            out[key] = value
    return out


def _read() -> dict[str, dict[str, Any]]:
    """The file's records, checked, expired ones left out; {} (and `problem()` set) when it is damaged."""
    global _problem
    _problem = None
    path = facts_path()
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE + 1)
    except OSError:
        return {}
    try:
        if len(raw) > MAX_FILE:
            raise ValueError(f"larger than {MAX_FILE} bytes")
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except (ValueError, RecursionError) as exc:
        _problem = f"crow: warning: learned facts in {path} are damaged ({type(exc).__name__}); none used"
        return {}
    now = time.time()
    out = {}
    for key, record in list(data.items())[:MAX_ENDPOINTS]:
        if isinstance(key, str) and len(key) <= 1024 and isinstance(record, dict):
            checked = _checked(record)
            if -_SKEW_S <= now - checked.get("learned_at", now) <= MAX_AGE:  # dated in the future: learned again
                out[key] = checked
    return out


def recall_all() -> dict[str, dict[str, Any]]:
    """Every remembered endpoint: `"BASE_URL MODEL"` -> facts ({} when there are none): values of the wrong
    type or size and records older than `MAX_AGE` are left out; a damaged file (not JSON, too deep, too large)
    counts as empty, with `problem()` saying so."""
    return _read()


def recall(base_url: str, model: str) -> dict[str, Any]:
    """The facts remembered for this endpoint and model, without their `learned_at` and `why`; {} when
    nothing is known (or the record expired)."""
    record = recall_all().get(endpoint_key(base_url, model)) or {}
    return {k: v for k, v in record.items() if k not in ("learned_at", "why")}


def learn(base_url: str, model: str, **facts: Any) -> str | None:
    """Merge `facts` (JSON values; checked as when read, what does not fit is left out) into this endpoint's
    record, stamped `learned_at` now, and write the file atomically (0600) under an exclusive lock of its
    directory, so concurrent runs each add theirs.

    Returns:
        None when the facts are stored (or there is nothing new to store); else why they could not be, in one
        line naming the path and the system's reason (`"/home/u/.local/state/crow: Permission denied"`).
        Never raises for the file system (read-only home, full disk): facts are an optimisation, and the
        caller says once that they were not kept.
    """
    facts = _checked({k: v for k, v in facts.items() if k != "learned_at"})
    if not facts:
        return None
    try:
        path = facts_path()
        private_dir(path.parent)
        with _locked(path.parent):
            data = _read()
            key = endpoint_key(base_url, model)
            record = dict(data.get(key) or {})
            if all(k in record and record[k] == v for k, v in facts.items()) and \
                    time.time() - record.get("learned_at", 0) < MAX_AGE / 2:
                return None  # nothing new: no write
            record.update(facts, learned_at=round(time.time(), 3))
            data.pop(key, None)
            data[key] = record
            _write(path, dict(list(data.items())[-MAX_ENDPOINTS:]))
    except OSError as exc:
        reason = f"it is {exc.strerror}" if isinstance(exc, NotRegularFile) else exc.strerror
        return f"{exc.filename or facts_path()}: {reason or 'cannot be written'}"
    return None


def forget(base_url: str | None = None, model: str | None = None) -> list[str]:
    """Drop the records of this base URL and/or model (both None: all); the keys dropped. Never raises."""
    try:
        path = facts_path()
        if not path.exists():
            return []
        with _locked(path.parent):
            data = _read()
            url = endpoint_key(base_url, "").rstrip() if base_url else None
            gone = [k for k in data if (url is None or k.rsplit(" ", 1)[0] == url)
                    and (model is None or k.rsplit(" ", 1)[-1] == model)]
            if gone or problem():
                _write(path, {k: v for k, v in data.items() if k not in gone})
            return gone
    except OSError:
        return []


def _write(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"), private=True)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on `directory` (waited for: writers hold it for one small read and write)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
