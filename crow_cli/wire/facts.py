"""Facts learned about an endpoint, remembered per base URL and model, read by later runs.

A small JSON file, `facts.json` in the platformdirs user state dir (`~/.local/state/crow/` on Linux), mode
0600, written by `crow probe` and by the client when a server refuses a field and the resent request is
accepted, so the next run does not pay the failed request again; shown by `crow facts list` and
`crow probe --show`. Keys are `"PUBLIC_BASE_URL MODEL"` (`endpoint_key`); no key is ever stored. Learned facts
come from servers, so nothing in them is trusted (`_checked`), and a write that fails returns why: facts are an
optimisation, never a reason to fail a run. The record's shape is told at `_read`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..atomic import NotRegularFile, write_atomic
from ..private import private_dir
from ..text import public_url
from .profile import CALL_FORMATS, TOOL_OUTCOMES, TOOL_POINTS
from .profiles import check_overrides
from .rules import SIZED_OPS, is_size
from .rules.check import rules_problem

__all__ = ["MAX_AGE", "MAX_WHY", "each_fact", "facts_path", "forget", "learn", "problems", "recall", "recall_all"]


def facts_path() -> Path:
    """The facts file (it may not exist yet)."""
    import platformdirs

    return Path(platformdirs.user_state_dir("crow", appauthor=False)) / "facts.json"


def endpoint_key(base_url: str, model: str) -> str:
    """`"PUBLIC_BASE_URL MODEL"`: how an endpoint is named in the file (no credentials, no query)."""
    return f"{public_url(base_url).rstrip('/')} {model}"


MAX_AGE = 30 * 24 * 3600.0
"""Seconds a record is trusted after it was last learned (30 days): older ones count as not known and are
learned again, so a server that changed is not held to what it once refused."""
_SKEW_S = 3600.0
"""How far in the future a record's `learned_at` may be (a clock set back, rounding): later, it is not known."""
MAX_FILE = 1 << 20
"""Bytes read of the file at most: a larger one counts as damaged."""
MAX_ENDPOINTS = 256
"""Endpoints kept; the oldest are dropped beyond this."""
MAX_ITEMS = 32
"""Items of a list fact (names, rules) kept."""
MAX_WHY = 200
"""Characters of a refusal kept as a fact's `why`."""
_MAX_WARNINGS = 10
"""Warnings said of one read at most; the rest are counted in one more line."""
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""A field, parameter or quirk name: what real servers name, bounded."""
_NAMES = ("refused_fields", "required_fields", "quirks")
"""Facts that are lists of names."""
_CONFIGURED = frozenset({"refused_fields", "required_fields", "tool_message_name", "request_rules"})
"""Facts that are also keys of the config's `[provider]` table: checked by the config's own checks
(`profiles.check_overrides`, `profile.rules_problem`), so a value the config refuses is no fact either."""
_TYPES: dict[str, tuple[type, ...]] = {"tool_message_name": (bool,), "tool_calling": (bool,),
                                       "usage_option_refused": (bool,), "context_window": (int,),
                                       "reasoning_echo": (str, type(None)), "learned_at": (int, float),
                                       "probed_at": (str,), "images": (bool,), "why": (str,)}
"""The type of each other fact crow reads (`why`: the refusal of a record written before each fact kept its
own, in `provenance`)."""
_META = ("learned_at", "why", "provenance")
"""Keys of a record that say when and why, not what: never passed to the profile."""

_problems: list[str] = []
_Warn = Callable[..., None]
"""`warn(fact, what, done="not used")`: one damaged entry of a record, as `_read` says it."""


def problems() -> list[str]:
    """What the last read of the file found damaged: one plain line per damaged entry (the file, or which
    server and model, which key, what is wrong), each entry counting as not known; [] when all was fine."""
    return list(_problems)


def _json_kind(value: Any) -> str:
    """What a JSON value is, in words."""
    return ("null" if value is None else "true or false" if isinstance(value, bool) else
            "a number" if isinstance(value, int | float) else "text" if isinstance(value, str) else
            "a list" if isinstance(value, list) else "a table")


def _kinds(types: tuple[type, ...]) -> str:
    words = {bool: "true or false", int: "a number", float: "a number", str: "text", type(None): "null"}
    return " or ".join(dict.fromkeys(words[t] for t in types))


def _said(value: Any) -> str:
    """`value` cut short and quoted, control characters escaped: file content shown in a warning."""
    text = value if isinstance(value, str) else json.dumps(value)
    return json.dumps(text if len(text) <= 60 else text[:60] + "…")


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 64)


def _config_problem(key: str, value: Any) -> str | None:
    """What the config's checks say of `[provider] KEY = [value]` (without naming the key), or None: fine."""
    said = check_overrides({key: [value]}) or (rules_problem([value]) if key == "request_rules" else None)
    return re.sub(rf"^\[provider\] {key}(\[0\])?:? ", "", said) if said else None


def _rule_problem(item: Any) -> str | None:
    """What is wrong with a stored request rule (`{"op", "target", "value"}`), or None."""
    if not isinstance(item, dict):
        return f"{_json_kind(item)}, not a table of op, target and value"
    op, target, value = item.get("op"), item.get("target", ""), item.get("value")
    if not isinstance(op, str) or not _NAME.fullmatch(op):
        return f"the kind {_said(op)} is not a name (letters, digits, _ . : -)"
    if not isinstance(target, str) or not (target == "" or _NAME.fullmatch(target)):
        return f"the target {_said(target)} is not a field name (letters, digits, _ . : -)"
    if not _scalar(value):
        return f"the value {_said(value)} is not a number, true or false, or text of at most 64 characters"
    if op in SIZED_OPS and not is_size(value):
        return f"the value {_said(value)} is not a size (a whole number from 1 to {(1 << 31) - 1})"
    # the config spells a rule without a target by leaving it out; a learned one stores ""
    return _config_problem("request_rules", {k: v for k, v in item.items() if not (k == "target" and v == "")})


def _names_problem(key: str, name: Any) -> str | None:
    """What is wrong with one name of a list of names (`_NAMES`), or None."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"{_said(name)} is not a name (letters, digits, _ . : -, at most 64)"
    return _config_problem(key, name) if key in _CONFIGURED else None


def _checked(record: dict[str, Any], warn: _Warn) -> dict[str, Any]:
    """`record` as crow reads it: known keys of the right type and bounded size only; `warn(key, what)` is
    called once for each key or item left out (`warn(key, what, done)`: what is done instead).

    Nothing from a server is trusted: a fixed schema (`_NAMES`, `_TYPES`, `request_rules` of bounded names and
    scalar values), bounded lengths and counts, and the checks of the config's `[provider]` table for the facts
    it may set too: a fact the config would refuse is no fact. Each damaged entry counts as not known, with one
    warning naming the server and model, the key and what is wrong (`problems()`).
    """
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in _NAMES or key == "request_rules":
            if not isinstance(value, list):
                warn(key, f"{_json_kind(value)}, not a list")
                continue
            if len(value) > MAX_ITEMS:
                warn(key, f"{len(value)} items, more than the {MAX_ITEMS} kept", "the rest are not used")
            kept = []
            for i, item in enumerate(value[:MAX_ITEMS]):
                problem = _rule_problem(item) if key == "request_rules" else _names_problem(key, item)
                if problem is not None:
                    warn(f"{key}[{i}]", problem)
                else:
                    kept.append({"op": item["op"], "target": item.get("target", ""), "value": item.get("value")}
                                if key == "request_rules" else item)
            out[key] = kept
        elif key == "tool_call_id_rule":  # the id shape a reader demands (`outgoing`): two bounded scalars
            if isinstance(value, dict) and not set(value) - {"chars", "length"} and all(map(_scalar, value.values())):
                out[key] = dict(value)
            else:
                warn(key, "not a table of chars and length")
        elif key == "tool_probe":  # what `crow probe --tools` found: point -> outcome, both of fixed words
            if isinstance(value, dict) and value and set(value) <= set(TOOL_POINTS) \
                    and all(v in TOOL_OUTCOMES for v in value.values()):
                out[key] = dict(value)
            else:
                warn(key, f"not a table of points ({', '.join(TOOL_POINTS)}) and outcomes "
                     f"({', '.join(TOOL_OUTCOMES)})")
        elif key == "text_call_format":
            if value in CALL_FORMATS:
                out[key] = value
            else:
                warn(key, f"{_said(value)} is not a format crow reads calls from ({', '.join(CALL_FORMATS)})")
        elif key == "provenance":
            out[key] = _provenance(value, warn)
        elif key not in _TYPES:
            warn(key, "no fact crow knows")
        elif not isinstance(value, _TYPES[key]) or (isinstance(value, bool) and bool not in _TYPES[key]):
            warn(key, f"{_json_kind(value)}, not {_kinds(_TYPES[key])}")
        elif key == "context_window" and not is_size(value):
            warn(key, f"{value} is not a size (a whole number from 1 to {(1 << 31) - 1})")
        else:
            out[key] = value[:MAX_WHY] if isinstance(value, str) else value
    if "provenance" in out:  # only of facts kept
        out["provenance"] = {k: v for k, v in out["provenance"].items() if k in each_fact(out)}
    return out


def _provenance(value: Any, warn: _Warn) -> dict[str, dict[str, Any]]:
    """The `provenance` table as read: fact -> {"learned_at": seconds, "why": refusal}; damaged ones left out."""
    if not isinstance(value, dict):
        warn("provenance", f"{_json_kind(value)}, not a table")
        return {}
    out = {}
    for item, entry in value.items():
        at = entry.get("learned_at") if isinstance(entry, dict) else None
        why = entry.get("why", "") if isinstance(entry, dict) else None
        if not isinstance(at, int | float) or isinstance(at, bool) or not isinstance(why, str) \
                or set(entry) - {"learned_at", "why"}:
            warn(f"provenance of {_said(item)}", "not a date and a refusal", "the fact is used, shown without them")
            continue
        out[item] = {"learned_at": at, "why": why[:MAX_WHY]} if why else {"learned_at": at}
    return out


def each_fact(record: Mapping[str, Any]) -> dict[str, Any]:
    """Each fact of a record (`recall_all`), by the name its provenance is kept under, in the record's order:
    one per name of a list (`quirks index-always-0`: the name), one per request rule (`request_rules drop_param
    seed`: the rule's JSON object), one per other key (`tool_calling`: its value); `probed_at` is no fact."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in _NAMES and isinstance(value, list):
            out.update((f"{key} {name}", name) for name in value)
        elif key == "request_rules" and isinstance(value, list):
            out.update((f"{key} {r['op']} {r['target']}".rstrip(), r) for r in value)
        elif key not in (*_META, "probed_at"):
            out[key] = value
    return out


_OLD_FORM = {"drop_field": "refused_fields {}", "require_field": "required_fields {}",
             "tool_message_name": "tool_message_name", "map_tool_call_ids": "tool_call_id_rule"}
"""Rule op -> the name (`each_fact`) of the message fact of the form before message-field rules were request
rules, which `profile.ServerProfile.remembered` turns into that rule."""


_RULES_NOW = ("tool_message_name", "tool_call_id_rule")
"""Old-form keys `learn` removes when given None: `profile.ServerProfile.remembered` stored them as rules (any
other fact given as None is left out, as `crow probe` gives one it could not tell)."""


def _old_form(item: str, value: Any) -> str | None:
    """The name of the old-form fact a request rule fact (`each_fact`) stands for; None for any other fact."""
    if not item.startswith("request_rules ") or not isinstance(value, Mapping) or value.get("op") not in _OLD_FORM:
        return None
    return _OLD_FORM[value["op"]].format(value.get("target"))


def _read() -> dict[str, dict[str, Any]]:
    """The file's records, checked, expired ones left out; {} when it is damaged; `problems()` says what was
    damaged.

    A record:

        {"http://127.0.0.1:8080/v1 smollm2": {
            "tool_calling": true, "quirks": ["index-always-0"],
            "request_rules": [{"op": "drop_param", "target": "seed", "value": null}],
            "tool_probe": {"one": "native", "typed": "malformed", "two": "none"}, "text_call_format": "hermes",
            "learned_at": 1764750000.0,
            "provenance": {"request_rules drop_param seed": {"learned_at": 1764750000.0,
                                                             "why": "400: Extra inputs are not permitted"},
                           "tool_calling": {"learned_at": 1764700000.0}, ...}}}

    Every rule the client learned is one of `request_rules`, message-field rules too (`drop_field`,
    `require_field` …); a record of an older crow keeps those as `refused_fields`, `required_fields`,
    `tool_message_name` and `tool_call_id_rule`, still read (`profile.ServerProfile.remembered` turns them into
    rules on the next write). Keys hold the base URL without credentials or query string (`text.public_url`).
    A record's `learned_at` (Unix seconds) is its last write: records older than `MAX_AGE` count as not known.
    Each fact keeps when it was learned and from which refusal in `provenance`; a record written before facts
    kept their own has one `why` (its last refusal) instead.

    A file larger than `MAX_FILE`, not JSON or nested too deep counts as empty, and is replaced on the next
    write. Writers hold an exclusive lock on the directory for their read-merge-write (`_locked`), so runs
    learning at once keep every fact.
    """
    path = facts_path()
    found: list[str] = []
    _problems[:] = []
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE + 1)
    except (FileNotFoundError, NotADirectoryError):  # nothing stored there (a write says why, if it fails)
        return {}
    except OSError as exc:
        _problems.append(f"crow: warning: learned facts in {path} cannot be read ({exc.strerror}); none are used")
        return {}
    damage = None
    data: Any = None
    if len(raw) > MAX_FILE:
        damage = f"it is larger than {MAX_FILE} bytes"
    else:
        try:
            data = json.loads(raw)
        except RecursionError:
            damage = "it is nested too deep"
        except UnicodeDecodeError:
            damage = "it is not UTF-8 text"
        except json.JSONDecodeError as exc:
            damage = f"it is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        else:
            if not isinstance(data, dict):
                damage = f"it is {_json_kind(data)}, not a table of servers and models"
    if damage is not None:
        _problems.append(f"crow: warning: learned facts in {path} are damaged: {damage}; none are used "
                         "(the file is replaced on the next write)")
        return {}
    now = time.time()
    out = {}
    entries = list(data.items())
    if len(entries) > MAX_ENDPOINTS:
        found.append(f"learned facts in {path}: {len(entries)} servers and models, more than the "
                     f"{MAX_ENDPOINTS} kept; the {len(entries) - MAX_ENDPOINTS} oldest are not used")
    for key, record in entries[-MAX_ENDPOINTS:]:
        where = _said(key) if len(key) > 1024 or not key.isprintable() else key
        if len(key) > 1024 or not isinstance(record, dict):
            what = "its name is too long" if len(key) > 1024 else f"it is {_json_kind(record)}, not a table"
            found.append(f"learned facts for {where}: {what}; none are used")
            continue

        def warn(fact: str, what: str, done: str = "not used", where: str = where) -> None:
            named = fact if fact.isprintable() and len(fact) <= 80 else _said(fact)
            found.append(f"learned facts for {where}, {named}: {what}; {done}")

        checked = _checked(record, warn)
        age = now - checked.get("learned_at", now)
        if age < -_SKEW_S:  # a clock set back, a file edited by hand: learned again
            found.append(f"learned facts for {where}, learned_at: in the future; none are used")
        elif age <= MAX_AGE:
            out[key] = checked
    more = len(found) - _MAX_WARNINGS
    _problems[:] = [f"crow: warning: {line}" for line in found[:_MAX_WARNINGS]]
    if more > 0:
        _problems.append(f"crow: warning: {more} more damaged entries in {path}, not used")
    return out


def recall_all() -> dict[str, dict[str, Any]]:
    """Every remembered endpoint: `"BASE_URL MODEL"` -> its record ({} when there are none): the facts, the
    record's `learned_at` (Unix seconds, the last write) and `provenance` (fact -> `{"learned_at", "why"}`,
    `_items` names the facts). Damaged entries are left out and records older than `MAX_AGE` too; a damaged
    file (not JSON, too deep, too large) counts as empty; `problems()` says what was damaged."""
    return _read()


def recall(base_url: str, model: str) -> dict[str, Any]:
    """The facts remembered for this endpoint and model, without when and why they were learned; {} when
    nothing is known (or the record expired)."""
    record = recall_all().get(endpoint_key(base_url, model)) or {}
    return {k: v for k, v in record.items() if k not in _META}


def learn(base_url: str, model: str, *, why: str = "", **facts: Any) -> str | None:
    """Merge `facts` (JSON values; checked as when read, what does not fit is left out) into this endpoint's
    record and write the file atomically (0600) under an exclusive lock of its directory, so concurrent runs
    each add theirs. The record is stamped `learned_at` now; each fact that is new or changed (each name of a
    list, each request rule) is stamped in `provenance` with now and `why` (the refusal it was learned from,
    cut to `MAX_WHY`; "" for what `crow probe` saw), and the others keep their own. `tool_message_name` or
    `tool_call_id_rule` given as None is removed (`_RULES_NOW`); any other None is left out.

    Returns:
        None when the facts are stored (or there is nothing new to store); else why they could not be, in one
        line naming the path and the system's reason (`"/home/u/.local/state/crow: Permission denied"`).
        Never raises for the file system (read-only home, full disk): facts are an optimisation, and the
        caller says once that they were not kept.
    """
    gone = [k for k, v in facts.items() if v is None and k in _RULES_NOW]
    facts = _checked({k: v for k, v in facts.items() if k not in _META and v is not None}, lambda *said: None)
    if not facts and not gone:
        return None
    try:
        path = facts_path()
        private_dir(path.parent)
        with _locked(path.parent):
            data = _read()
            key = endpoint_key(base_url, model)
            record = dict(data.get(key) or {})
            if all(k in record and record[k] == v for k, v in facts.items()) and not set(gone) & set(record) and \
                    time.time() - record.get("learned_at", 0) < MAX_AGE / 2:
                return None  # nothing new: no write
            now = round(time.time(), 3)
            before = each_fact(record)
            record.update(facts, learned_at=now)
            for fact in gone:
                record.pop(fact, None)
            stamp = {"learned_at": now, "why": why[:MAX_WHY]} if why else {"learned_at": now}
            provenance = dict(record.get("provenance") or {})
            items = each_fact(record)
            for item, value in items.items():
                if item in before and before[item] == value:
                    continue
                if (was := _old_form(item, value)) in before:  # the same fact, now a rule: its own refusal
                    if was in provenance:
                        provenance[item] = provenance[was]
                    continue
                provenance[item] = stamp
            record["provenance"] = {item: p for item, p in provenance.items() if item in items}
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
            if gone or problems():  # a damaged entry is dropped too
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
