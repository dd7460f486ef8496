"""Settings from flags, environment, the TOML config file and defaults, in that order of precedence.

Config file: `crow/config.toml` in the platformdirs user config dir (`~/.config/crow/config.toml` on
Linux), or `--config PATH`. Every key is shown in `config.example.toml`. API keys are never read from
the file itself: `api_key_env` names the environment variable that holds one.

Key lookup: `--api-key` > `CROW_API_KEY` > the variable named by `api_key_env` > `OPENAI_API_KEY`.
Base URL:   `--base-url` > `CROW_BASE_URL` > config `base_url` > `OPENAI_BASE_URL` > OpenAI.
Model:      `--model` > `CROW_MODEL` > config `model` > `gpt-4o-mini`.
A profile's keys (`[profiles.NAME]`, chosen by `--profile` or top-level `profile`) override the
top-level keys of the file.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "Settings", "default_config_path", "load_settings"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"

_KEYS = {
    "model": str, "base_url": str, "api_key_env": str, "system": str, "max_turns": int, "tool_timeout": (int, float),
    "idle_timeout": (int, float), "max_retries": int, "tool_paths": list, "headers": dict, "params": dict,
    "max_output_chars": int, "approval": str, "workspace": str, "allow": list, "deny": list, "mcp_servers": dict,
    "context_window": int,
}


@dataclass(frozen=True)
class Settings:
    """Everything a run needs, resolved."""

    model: str = DEFAULT_MODEL
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    """Secret: never printed, logged or stored."""
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    system: str | None = None
    max_turns: int = 25
    tool_timeout_s: float = 120.0
    idle_timeout_s: float = 300.0
    max_retries: int = 3
    max_output_chars: int = 50_000
    tool_paths: tuple[str, ...] = ()
    approval: str | None = None
    """Approval policy: `ask`, `auto-edit` or `yolo` (None: the surface's default)."""
    allow: tuple[str, ...] = ()
    """Approval rules that approve without asking (tool names or `run_shell:PREFIX`): config, then flags."""
    deny: tuple[str, ...] = ()
    """Approval rules that refuse, whatever the policy: config, then flags."""
    workspace: str | None = None
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`[mcp_servers.NAME]` tables: `command`/`args`/`env`/`cwd` (stdio) or `url` (streamable HTTP)."""
    profile: str | None = None
    config_path: str | None = None
    context_window: int | None = None
    """The model's context window in tokens (config `context_window`); None: asked of the server."""
    instructions: tuple[Any, ...] = ()
    """The `instructions.Instructions` (AGENTS.md files) whose text ends `system`, as a surface loaded them."""


def default_config_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_config_dir("crow", appauthor=False)) / "config.toml"


def _read_config(path: Path, explicit: bool) -> dict[str, Any]:
    if not path.exists():
        if explicit:
            raise ConfigError(f"config file {str(path)!r} does not exist")
        return {}
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror}") from exc


def _check(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _KEYS:
            raise ConfigError(f"unknown key {key!r} in {where}; see config.example.toml for the keys")
        if not isinstance(value, _KEYS[key]) or isinstance(value, bool):
            raise ConfigError(f"{where}: {key!r} has the wrong type ({type(value).__name__})")
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{where}: {key!r} must be a list of strings")
        out[key] = value
    return out


def _checked_key(key: str | None) -> str | None:
    """The key without surrounding whitespace (a key file's newline); never echoed in errors."""
    if key is None:
        return None
    key = key.strip()
    if not key:
        return None
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise ConfigError("the API key holds characters an HTTP header cannot carry (spaces, control or "
                          "non-ASCII characters); check how it was set")
    return key


def load_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_path: str | None = None,
    profile: str | None = None,
) -> Settings:
    """Resolve settings.

    Args:
        flags: command-line values; None values mean "not given". Keys are `Settings` field names.
        env: the environment (default `os.environ`).
        config_path: an explicit config file (must exist), else the default location (may be absent).
        profile: a `[profiles.NAME]` table to apply (must exist).

    Raises:
        ConfigError: unreadable or invalid config, unknown profile, or a bad value.
    """
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = os.environ if env is None else env
    path = Path(config_path).expanduser() if config_path else default_config_path()
    data = _read_config(path, explicit=bool(config_path))
    profiles = data.pop("profiles", {}) or {}
    if not isinstance(profiles, dict) or not all(isinstance(t, dict) for t in profiles.values()):
        raise ConfigError(f"{path}: 'profiles' must hold tables, like [profiles.NAME]")
    chosen = profile or env.get("CROW_PROFILE") or data.pop("profile", None) or None
    data.pop("profile", None)
    file = _check(data, str(path))
    if chosen:
        if chosen not in profiles:
            known = ", ".join(sorted(profiles)) or "none defined"
            raise ConfigError(f"unknown profile {chosen!r} (profiles: {known})")
        file.update(_check(profiles[chosen], f"{path} [profiles.{chosen}]"))

    def pick(flag: str, env_name: str | None, key: str, fallback_env: str | None, default: Any) -> Any:
        for value in (flags.get(flag), env.get(env_name) if env_name else None, file.get(key),
                      env.get(fallback_env) if fallback_env else None):
            if value not in (None, ""):
                return value
        return default

    key_env = file.get("api_key_env")
    api_key = pick("api_key", "CROW_API_KEY", "__none__", None, None) or (env.get(key_env) if key_env else None) \
        or env.get("OPENAI_API_KEY") or None
    api_key = _checked_key(api_key)
    max_turns = int(pick("max_turns", None, "max_turns", None, 25))
    if max_turns < 1:
        raise ConfigError("--max-turns must be at least 1")
    base_url = str(pick("base_url", "CROW_BASE_URL", "base_url", "OPENAI_BASE_URL", DEFAULT_BASE_URL)).rstrip("/")
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"base URL {base_url!r} must start with http:// or https://")
    def number(kind: type[float] | type[int], flag: str, env_name: str | None, key: str, default: float) -> float:
        raw = pick(flag, env_name, key, None, default)
        try:
            return kind(raw)
        except (TypeError, ValueError):
            source = ("the command line" if flags.get(flag) not in (None, "") else
                      env_name if env_name and env.get(env_name) not in (None, "") else str(path))
            raise ConfigError(f"{key} is not a number: {str(raw)!r} (from {source})") from None

    numbers = {
        "tool_timeout": number(float, "tool_timeout_s", None, "tool_timeout", 120.0),
        "idle_timeout": number(float, "idle_timeout_s", "CROW_IDLE_TIMEOUT", "idle_timeout", 300.0),
        "max_output_chars": number(int, "max_output_chars", None, "max_output_chars", 50_000),
    }
    for name, value in numbers.items():
        if value <= 0:
            raise ConfigError(f"{name} must be greater than 0 (got {value:g})")
    max_retries = int(pick("max_retries", None, "max_retries", None, 3))
    if max_retries < 0:
        raise ConfigError(f"max_retries must be 0 or more (got {max_retries})")
    tool_paths = tuple(str(p) for p in file.get("tool_paths", [])) + tuple(flags.get("tool_paths", ()))
    rules = {key: tuple(str(r) for r in file.get(key, [])) + tuple(flags.get(key, ())) for key in ("allow", "deny")}
    mcp_servers = file.get("mcp_servers", {})
    for name, table in mcp_servers.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [mcp_servers.{name}] must be a table")
    return Settings(
        model=str(pick("model", "CROW_MODEL", "model", None, DEFAULT_MODEL)),
        base_url=base_url,
        api_key=api_key,
        headers={str(k): str(v) for k, v in file.get("headers", {}).items()},
        params=dict(file.get("params", {})),
        system=pick("system", None, "system", None, None),
        max_turns=max_turns,
        tool_timeout_s=numbers["tool_timeout"],
        idle_timeout_s=numbers["idle_timeout"],
        max_retries=max_retries,
        max_output_chars=int(numbers["max_output_chars"]),
        tool_paths=tool_paths,
        approval=pick("approval", None, "approval", None, None),
        allow=rules["allow"],
        deny=rules["deny"],
        workspace=pick("workspace", None, "workspace", None, None),
        mcp_servers=dict(mcp_servers),
        profile=chosen,
        config_path=str(path) if path.exists() else None,
        context_window=_context_window(file.get("context_window"), path),
    )


def _context_window(value: int | None, path: Path) -> int | None:
    if value is not None and value < 256:
        raise ConfigError(f"{path}: context_window must be a number of tokens, at least 256 (got {value})")
    return value
