"""Settings from flags, environment, the TOML config file and defaults, in that order of precedence.

Every key is one row of `OPTIONS` (name, type, flag, environment variable, default, check) and is shown in
`config.example.toml`; a profile's keys (`[profiles.NAME]`) override the top-level ones (`Option.merge`). API keys
go only to the server they were configured for (`key_server`: scheme, host and port) and are never read from the
file itself; which key applies, in which order, is `_api_key` and docs/configuration.md.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigError
from .modes import APPROVAL_MODES, REASONING_ECHO, SANDBOX_MODES, ApprovalMode, ReasoningEcho, SandboxMode
from .text import header_secrets, is_secret_name, proxy_secrets, public_url, strip_controls, url_secrets
from .wire.profiles import KEYED_HOSTS, OWNED_PARAMS, check_overrides

__all__ = ["APPROVAL_MODES", "DEFAULT_BASE_URL", "DEFAULT_MODEL", "KEYED_HOSTS", "OPTIONS", "OWNED_PARAMS", "Option",
           "Settings", "default_config_path", "key_server", "load_settings", "require_api_key"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
# `approval`, `sandbox`, `reasoning_echo`: their values are declared once, in `modes`
_OPENAI_HOST = "api.openai.com"


@dataclass(frozen=True)
class Settings:
    """Everything a run needs, resolved."""

    model: str = DEFAULT_MODEL
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    """Secret: never printed, logged or stored."""
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    """Extra request headers; may hold credentials (`Authorization`), so not in the repr."""
    params: dict[str, Any] = field(default_factory=dict)
    params_from: str | None = None
    """Where `params` were set (`[params] in FILE`, `[profiles.NAME.params] in FILE`), as errors about a refused
    value name it; None: not from a config file."""
    system: str | None = None
    default_prompt: bool = False
    """Start the system prompt with crow's built-in one (`default_prompt`): workspace, OS, date, modes, tools.
    `load_settings` turns it on unless the config, `CROW_DEFAULT_PROMPT` or `--no-default-prompt` says no; a
    `Settings` made by hand (the library's callers, tests) asks for it by name."""
    system_prompt_file: str | None = None
    """A file whose text replaces the built-in prompt (`--system-file`), with the same `$name` placeholders."""
    max_turns: int = 25
    max_repeats: int = 3
    """The turn in a row repeating the same tool calls that is answered without running them; one more ends the
    run (`--max-repeats`; 0: never; else at least 2: the first call always runs)."""
    tool_timeout_s: float = 120.0
    idle_timeout_s: float = 300.0
    first_byte_timeout_s: float = 60.0
    """Seconds from sending a request to the start of its response before the turn fails (no retry)."""
    reasoning_echo: ReasoningEcho = "auto"
    """Whether a turn's reasoning goes back to the server: `auto`, `always` or `never` (`wire.client`)."""
    adapt_requests: bool = True
    """Change what a server refuses in a request, send it again and remember the change (`wire.change`)."""
    repair_tool_calls: bool = True
    """What crow does for a tool call a small model got wrong: arguments checked against the schema with its
    coercions, a tool name in another case run as that tool, calls left in the text recovered, the repeat guard
    (`CROW_REPAIR_TOOL_CALLS=0` turns all four off: `bench/local_tools.py` measures the difference)."""
    provider: dict[str, Any] = field(default_factory=dict)
    """The `[provider]` table: overrides of what crow knows of the server (`wire.profiles.Profile`)."""
    max_retries: int = 3
    max_output_chars: int = 50_000
    tool_paths: tuple[str, ...] = ()
    approval: ApprovalMode | None = None
    """Approval policy: `ask`, `auto-edit`, `yolo` or `read-only` (None: the surface's default)."""
    allow: tuple[str, ...] = ()
    """Approval rules that approve without asking (tool names or `run_shell:PREFIX`): config, then flags."""
    deny: tuple[str, ...] = ()
    """Approval rules that refuse, whatever the policy: config, then flags."""
    workspace: str | None = None
    sandbox: SandboxMode = "workspace-write"
    """How `run_shell` commands are confined: `workspace-write`, `read-only` or `off` (`tools.sandbox`)."""
    sandbox_network: bool = False
    """Whether confined commands may use the network."""
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`[mcp_servers.NAME]` tables: `command`/`args`/`env`/`cwd` (stdio) or `url` (streamable HTTP)."""
    profile: str | None = None
    config_path: str | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Every credential the configuration names, sent to this server or not (`--api-key`, `CROW_API_KEY`,
    `OPENAI_API_KEY`, each `api_key_env` variable of the file, credential header values): tools and
    their output must never show them to the model."""
    api_key_problem: str | None = None
    """Why no key could be taken (an `api_key_env` that applies but is unset); `require_api_key` raises it,
    commands that send nothing (`crow tools`) do not care."""
    context_window: int | None = None
    """The model's context window in tokens (config `context_window`); None: asked of the server."""
    local_model: str | None = None
    """A .gguf file `--local` serves instead of its bundled model (config `local_model`, `--local-model`)."""
    instructions: tuple[Any, ...] = ()
    """The `instructions.Instructions` (AGENTS.md files) whose text ends `system`, as a surface loaded them."""
    hooks: dict[str, Any] = field(default_factory=dict)
    """The `[[hooks.EVENT]]` tables (`tools.hooks.parse_hooks` reads and checks them when a run starts)."""
    prices: dict[str, dict[str, float]] = field(default_factory=dict)
    """`[prices."MODEL"]` tables: `input`, `output`, `cached_input` in US dollars per million tokens, for the
    cost shown beside token use (`surfaces.usage`)."""
    web: dict[str, Any] = field(default_factory=dict)
    """The `[web]` table: `allow_hosts` (hosts `web_fetch` fetches without asking, private addresses too) and
    `search_url` (a SearXNG instance for `web_search`; none: no such tool)."""
    chat: dict[str, Any] = field(default_factory=dict)
    """The `[chat]` table: `status_line` (true: the built-in line under chat's prompt, false or "": none, a
    string: a shell command whose first line of output is the line; `surfaces.chat.status`)."""
    max_background_commands: int = 4
    """Commands `run_shell` keeps running in the background at once at most (0: none)."""
    model_named: bool = True
    """Whether a flag, `CROW_MODEL` or the config file named the model (False: `DEFAULT_MODEL` stands in, which
    a server not OpenAI's likely does not serve; `crow run` and `crow chat` then ask its `/models`)."""


def _at_least(low: float) -> Callable[[Any], str | None]:
    wanted = "0 or more" if low == 0 else f"at least {low:g}"
    return lambda v: None if v >= low else f"must be {wanted} (got {v:g})"


def _repeats(value: int) -> str | None:
    """`max_repeats`: 0 turns the guard off; 1 would answer every first call as a repeat (nothing would run)."""
    return None if value == 0 or value >= 2 else f"must be 0 (never) or at least 2 (got {value})"


def _positive(value: float) -> str | None:
    return None if value > 0 else f"must be greater than 0 (got {value:g})"


def _http_url(value: str) -> str | None:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        return f"is not a valid URL: {public_url(value)!r}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must start with http:// or https:// and name a host (got {public_url(value)!r})"
    return None


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "is empty"


def _owned_params(value: dict[str, Any]) -> str | None:
    owned = [k for k in value if k in OWNED_PARAMS]
    if owned:
        return (f"[params] cannot set {owned[0]!r}: crow sets {', '.join(OWNED_PARAMS)} itself "
                "(the model with `model` or --model, tools with --no-tools)")
    return None


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP field name (RFC 9110 §5.1: a token)."""


def _header_lines(value: dict[str, Any]) -> str | None:
    """A header whose name or value would break the request: a line break (or another control character)
    would end the header early; a name that is no token or a value that is not ASCII (what httpx sends) is
    refused by the transport, which reads as a connection error. The value is never quoted: it may be a
    credential."""
    for name, item in value.items():
        if re.search(r"[\x00-\x08\x0a-\x1f\x7f]", f"{name}{item}"):
            return f"[headers] {strip_controls(str(name))!r} holds a line break or control character"
        if not _HEADER_NAME.fullmatch(name):
            return (f"[headers] {strip_controls(str(name))!r} is no header name (letters, digits and "
                    "!#$%&'*+-.^_`|~, no spaces)")
        if not isinstance(item, str | int | float) or not str(item).isascii():
            return f"[headers] {name!r} must be text of ASCII characters (HTTP sends header values so)"
    return None


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)} (got {value!r})"
    return check


PRICE_KEYS = ("input", "output", "cached_input")
"""What a `[prices."MODEL"]` table may hold: US dollars per million prompt, completion and cached prompt tokens."""


def _prices(value: dict[str, Any]) -> str | None:
    for model, table in value.items():
        shown = strip_controls(str(model))
        where = f"[prices.{shown}]" if re.fullmatch(r"[A-Za-z0-9_-]+", shown) else f'[prices."{shown}"]'
        if not isinstance(table, dict):
            return f"{where} must be a table (input = 2.5, output = 10, in US dollars per million tokens)"
        for key, price in table.items():
            if key not in PRICE_KEYS:
                return f"{where} has an unknown key {strip_controls(str(key))!r} (keys: {', '.join(PRICE_KEYS)})"
            if isinstance(price, bool) or not isinstance(price, int | float) or not 0 <= price < float("inf"):
                return f"{where} {key} must be a number of US dollars per million tokens, 0 or more (got {price!r})"
    return None


def _hook_tables(value: dict[str, Any]) -> str | None:
    """The shape of `[[hooks.EVENT]]` (each event a list of tables); `tools.hooks.parse_hooks` checks the rest."""
    for event, entries in value.items():
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            return f"hooks.{strip_controls(str(event))} must be tables, written [[hooks.{strip_controls(str(event))}]]"
    return None


def _allow_hosts_problem(entry: str) -> str | None:
    """Why `entry` of `[web] allow_hosts` names no host (a bare `*`, a URL, a network that is none), or None."""
    bare = entry.strip().strip("[]").rstrip(".").lower()
    if "/" in bare:
        try:
            ipaddress.ip_network(bare, strict=False)
        except ValueError:
            return f"{entry!r} is not a network (\"192.168.1.0/24\")" if "://" not in bare else (
                f"{entry!r} is not a host name: give the host alone (\"x.example\")")
        return None
    name = bare[2:] if bare.startswith("*.") else bare
    if not name or "*" in name or (":" in name and not _is_address(name)):
        return f"{entry!r} is not a host name, an address, \"*.SUFFIX\" or a network"
    return None


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _web(value: dict[str, Any]) -> str | None:
    """`[web]`: `allow_hosts`, a list of host names or addresses; `search_url`, an http(s) URL."""
    unknown = sorted(set(value) - {"allow_hosts", "search_url"})
    if unknown:
        return f"[web] has no key {unknown[0]!r} (its keys: allow_hosts, search_url)"
    hosts = value.get("allow_hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h.strip() and not any(c.isspace() for c in h)
                                              for h in hosts):
        return "[web] allow_hosts must be a list of host names or addresses (\"localhost\", \"*.corp.example\")"
    problem = next((p for p in map(_allow_hosts_problem, hosts) if p is not None), None)
    if problem is not None:
        return f"[web] allow_hosts: {problem}"
    search = value.get("search_url")
    if search is not None and (not isinstance(search, str) or _http_url(search) is not None):
        return "[web] search_url must be an http:// or https:// URL (a SearXNG instance)"
    return None


def _chat(value: dict[str, Any]) -> str | None:
    """`[chat]`: only `status_line`, true, false or a shell command."""
    if unknown := sorted(set(value) - {"status_line"}):
        return f"[chat] has no key {unknown[0]!r} (its keys: status_line)"
    if not isinstance(value.get("status_line", True), bool | str):
        return "[chat] status_line must be true, false or a shell command (a string)"
    return None


def _tables(value: dict[str, Any]) -> str | None:
    bad = [name for name, table in value.items() if not isinstance(table, dict)]
    return f"[mcp_servers.{bad[0]}] must be a table" if bad else None


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: where it is read from and how it is checked (one row of `OPTIONS`)."""

    key: str
    """Its name in the config file."""
    kind: type
    """`str`, `int`, `float` (an integer is accepted), `bool` (the environment: 1/0, true/false, yes/no,
    on/off), `list` (of strings; file and flags add up) or `dict`."""
    field: str = ""
    """The `Settings` field (and the `flags` key of `load_settings`); default: `key`."""
    flag: str | None = None
    """The command-line flag, as errors name it."""
    env: str | None = None
    """The environment variable read between the flag and the file."""
    default: Any = None
    check: Callable[[Any], str | None] | None = None
    """Returns what is wrong with a value (the message after the source), or None."""
    merge: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None
    """For a table: how the tables of the file's layers (top level first, then the profile's) make one, each
    checked on its own; None: the last table that sets the key is the value."""

    @property
    def name(self) -> str:
        """The `Settings` field."""
        return self.field or self.key



def _check_provider(table: Mapping[str, Any]) -> str | None:
    """`[provider]` as `wire.profiles.check_overrides` checks it, and its request rules as rules crow knows."""
    problem = check_overrides(table)
    if problem is None and "request_rules" in table:
        from .wire.rules.check import rules_problem  # only for a config that sets rules: the rule classes load

        problem = rules_problem(table["request_rules"], table)
    return problem


def _merge_provider(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """The `[provider]` tables of the file's layers as one, as the server profile layers them
    (`wire.profile.build_profile`): a later table's key replaces an earlier one's, its `request_rules` join the
    earlier ones (a rule of the same decision replacing the earlier one there)."""
    merged: dict[str, Any] = {}
    for table in tables:
        for key, value in table.items():
            merged[key] = [*merged.get(key, []), *value] if key == "request_rules" else value
    return merged

OPTIONS: tuple[Option, ...] = (
    Option("model", str, flag="--model", env="CROW_MODEL", default=DEFAULT_MODEL, check=_non_empty),
    Option("base_url", str, flag="--base-url", env="CROW_BASE_URL", check=_http_url),  # then OPENAI_BASE_URL
    Option("api_key_env", str, check=_non_empty),  # the key itself is resolved by _api_key
    Option("system", str, flag="--system"),
    Option("default_prompt", bool, flag="--no-default-prompt", env="CROW_DEFAULT_PROMPT", default=True),
    Option("system_prompt_file", str, flag="--system-file", check=_non_empty),
    Option("max_turns", int, flag="--max-turns", default=25, check=_at_least(1)),
    Option("max_repeats", int, flag="--max-repeats", default=3, check=_repeats),
    Option("tool_timeout", float, field="tool_timeout_s", default=120.0, check=_positive),
    Option("idle_timeout", float, field="idle_timeout_s", env="CROW_IDLE_TIMEOUT", default=300.0, check=_positive),
    Option("max_retries", int, default=3, check=_at_least(0)),
    Option("max_output_chars", int, default=50_000, check=_positive),
    Option("approval", str, flag="--approval", check=_one_of(APPROVAL_MODES)),
    Option("workspace", str, flag="--workspace"),
    Option("sandbox", str, flag="--sandbox", env="CROW_SANDBOX", default="workspace-write",
           check=_one_of(SANDBOX_MODES)),
    Option("sandbox_network", bool, env="CROW_SANDBOX_NETWORK", default=False),
    Option("tool_paths", list, flag="--tools-dir"),
    Option("allow", list, flag="--allow"),
    Option("deny", list, flag="--deny"),
    Option("headers", dict, check=_header_lines),
    Option("params", dict, check=_owned_params),
    Option("mcp_servers", dict, check=_tables),
    Option("first_byte_timeout", float, field="first_byte_timeout_s", env="CROW_FIRST_BYTE_TIMEOUT", default=60.0,
           check=_positive),
    Option("reasoning_echo", str, env="CROW_REASONING_ECHO", default="auto", check=_one_of(REASONING_ECHO)),
    Option("context_window", int, check=_at_least(256)),
    Option("adapt_requests", bool, env="CROW_ADAPT_REQUESTS", default=True),
    Option("repair_tool_calls", bool, env="CROW_REPAIR_TOOL_CALLS", default=True),
    Option("provider", dict, check=_check_provider, merge=_merge_provider),  # the config layer of wire.profile
    Option("local_model", str, flag="--local-model", env="CROW_LOCAL_MODEL", check=_non_empty),
    Option("prices", dict, check=_prices),  # [prices."MODEL"]: the cost beside token use
    Option("hooks", dict, check=_hook_tables),  # [[hooks.EVENT]]: lifecycle hooks (tools.hooks)
    Option("web", dict, check=_web),  # [web]: allow_hosts, search_url (web_fetch, web_search)
    Option("max_background_commands", int, default=4, check=_at_least(0)),  # run_shell background
    Option("chat", dict, check=_chat),  # [chat]: status_line (surfaces.chat.status)
)
_BY_KEY = {o.key: o for o in OPTIONS}


def default_config_path() -> Path:
    """`crow/config.toml` in the platformdirs user config dir."""
    import platformdirs

    return Path(platformdirs.user_config_dir("crow", appauthor=False)) / "config.toml"


def _read_config(path: Path, explicit: bool) -> dict[str, Any]:
    if not path.exists():
        if explicit:
            raise ConfigError(f"config file {str(path)!r} does not exist")
        return {}
    try:
        # O_NONBLOCK and a regular-file check: a FIFO (`--config <(…)` or a named pipe) would block for ever
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if not stat.S_ISREG(mode):
                what = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "not a regular file"
                raise ConfigError(f"config file {str(path)!r} is {what}; give a regular file")
            raw = fh.read()
        # TOML is UTF-8; a byte order mark (Windows editors) is not part of the text
        return tomllib.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                          f"{exc.start}); save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror}") from exc


def _check_table(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The table's keys, type-checked (TOML already typed them)."""
    for key, value in table.items():
        option = _BY_KEY.get(key)
        if option is None:
            import difflib  # only for the error: a typo's nearest key, as a mistyped flag gets

            close = difflib.get_close_matches(key, [*_BY_KEY, "profile", "profiles"], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown key {key!r} in {where}{hint}; see config.example.toml for the keys")
        kind: type | tuple[type, ...] = (int, float) if option.kind is float else option.kind
        if not isinstance(value, kind) or (isinstance(value, bool) and option.kind is not bool):
            raise ConfigError(f"{where}: {key!r} has the wrong type ({type(value).__name__})")
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{where}: {key!r} must be a list of strings")
    return dict(table)


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


def key_server(url: str) -> tuple[str, str, int | None]:
    """What a key is bound to: scheme, host and port of `url` (default ports filled in)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ("", url, None)
    scheme = parts.scheme.lower()
    return (scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme))


@dataclass(frozen=True, slots=True)
class _Layer:
    """One table of the config file: its keys and how errors name it."""

    values: dict[str, Any]
    where: str


def load_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_path: str | None = None,
    profile: str | None = None,
) -> Settings:
    """Resolve settings, each key by its `OPTIONS` row: flag > environment > file > default.

    Args:
        flags: command-line values; None values mean "not given". Keys are `Settings` field names
            (plus `api_key`). An empty string is refused (an unset shell variable), except `system`, where it
            means no system prompt.
        env: the environment (default `os.environ`).
        config_path: an explicit config file (must exist), else the default location (may be absent).
        profile: a `[profiles.NAME]` table to apply (must exist).

    Raises:
        ConfigError: unreadable or invalid config, unknown profile, an empty flag, or a bad value (the message
            names the flag, variable or file key it came from). An `api_key_env` that applies but is unset is kept
            in `api_key_problem` for `require_api_key`.
    """
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    for flag, value in (("--api-key", flags.get("api_key")), ("--profile", profile)):
        if value == "":  # an unset variable: the key or profile of the environment or file would be used instead
            raise ConfigError(f"{flag} needs a value (an empty one was given)")
    env = os.environ if env is None else env
    path = Path(config_path).expanduser() if config_path else default_config_path()
    data = _read_config(path, explicit=bool(config_path))
    profiles = data.pop("profiles", {}) or {}
    if not isinstance(profiles, dict) or not all(isinstance(t, dict) for t in profiles.values()):
        raise ConfigError(f"{path}: 'profiles' must hold tables, like [profiles.NAME]")
    chosen = profile or env.get("CROW_PROFILE") or data.get("profile") or None
    chosen_by = ("--profile" if profile else "CROW_PROFILE" if env.get("CROW_PROFILE")
                 else f"'profile' in {path}")
    data.pop("profile", None)
    if chosen is not None and not isinstance(chosen, str):
        raise ConfigError(f"{path}: 'profile' must be a string")
    layers = [_Layer(_check_table(data, str(path)), str(path))]
    if chosen:
        if chosen not in profiles:
            known = ", ".join(sorted(profiles)) or "none defined"
            raise ConfigError(f"unknown profile {chosen!r} (from {chosen_by}; profiles: {known})")
        where = f"{path} [profiles.{chosen}]"
        layers.append(_Layer(_check_table(profiles[chosen], where), where))

    values: dict[str, Any] = {}
    for option in OPTIONS:
        values[option.key] = _resolve(option, flags, env, layers)
    if values["system_prompt_file"] is not None and "system_prompt_file" not in flags:
        # a config file's path is the file's, wherever crow runs from (a flag's is the shell's)
        values["system_prompt_file"] = str(path.parent / Path(values["system_prompt_file"]).expanduser())
    _check_set_params(layers, values["params"])
    base_url = str(values["base_url"] or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    if values["base_url"] is None and (problem := _http_url(base_url)):
        raise ConfigError(f"OPENAI_BASE_URL {problem}")
    try:
        api_key, problem = _checked_key(flags.get("api_key") or _api_key(env, layers, base_url)), None
    except _UnsetKey as exc:
        api_key, problem = None, str(exc)
    headers_layer = next((layer for layer in reversed(layers) if "headers" in layer.values), None)
    headers = {str(k): str(v) for k, v in values["headers"].items()}
    if headers_layer is not None and key_server(_home(headers_layer, layers, env)) != key_server(base_url):
        headers = {k: v for k, v in headers.items() if not is_secret_name(k)}  # not this server's
    return Settings(
        model=str(values["model"]), base_url=base_url, api_key=api_key, headers=headers,
        params=dict(values["params"]), params_from=_params_from(layers, path, chosen), system=values["system"],
        max_turns=int(values["max_turns"]), max_repeats=int(values["max_repeats"]),
        default_prompt=bool(values["default_prompt"]), system_prompt_file=values["system_prompt_file"],
        tool_timeout_s=float(values["tool_timeout"]), idle_timeout_s=float(values["idle_timeout"]),
        first_byte_timeout_s=float(values["first_byte_timeout"]), reasoning_echo=values["reasoning_echo"],
        max_retries=int(values["max_retries"]), max_output_chars=int(values["max_output_chars"]),
        tool_paths=values["tool_paths"], approval=values["approval"], allow=values["allow"], deny=values["deny"],
        workspace=values["workspace"], sandbox=values["sandbox"],  # Literals, like approval: checked by _one_of
        sandbox_network=bool(values["sandbox_network"]),
        mcp_servers=dict(values["mcp_servers"]), profile=chosen,
        config_path=str(path) if path.exists() else None, api_key_problem=problem,
        secrets=(*_secrets(flags, env, [*layers, *(_Layer(t, "") for t in profiles.values())]),
                 *url_secrets(base_url)),
        context_window=values["context_window"], adapt_requests=bool(values["adapt_requests"]),
        repair_tool_calls=bool(values["repair_tool_calls"]),
        provider=dict(values["provider"] or {}), local_model=values["local_model"],
        prices={str(m): {k: float(v) for k, v in t.items()} for m, t in values["prices"].items()},
        hooks=dict(values["hooks"]),
        web=dict(values["web"] or {}), chat=dict(values["chat"] or {}),
        max_background_commands=int(values["max_background_commands"]),
        model_named=bool(flags.get("model") or env.get("CROW_MODEL") or any(layer.values.get("model")
                                                                           for layer in layers)),
    )


_BOOL_WORDS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False,
               "off": False}


def _params_from(layers: list[_Layer], path: Path, profile: str | None) -> str | None:
    """Where the `params` table in force was set: `[params] in FILE` or `[profiles.NAME.params] in FILE`."""
    layer = next((layer for layer in reversed(layers) if "params" in layer.values), None)
    if layer is None:
        return None
    return f"[params] in {path}" if layer is layers[0] else f"[profiles.{profile}.params] in {path}"


def _resolve(option: Option, flags: Mapping[str, Any], env: Mapping[str, str], layers: list[_Layer]) -> Any:
    """One option's value: flag > environment > the last file layer that sets it > default; checked."""
    # an empty string in a table counts as unset (as an empty variable does): a profile's leaves the top level's
    file_layer = next((layer for layer in reversed(layers) if option.key in layer.values
                       and (option.kind in (list, dict) or layer.values[option.key] != "")), None)
    if option.kind is list:  # file and flags add up
        file_items = tuple(str(v) for v in file_layer.values[option.key]) if file_layer else ()
        return file_items + tuple(str(v) for v in flags.get(option.name, ()))
    if option.kind is dict and option.merge is not None:
        tables = [layer for layer in layers if option.key in layer.values]
        for layer in tables:  # each checked on its own: the error names the table it is in
            if option.check is not None and (problem := option.check(layer.values[option.key])):
                raise ConfigError(f"{layer.where}: {problem}")
        return option.merge([layer.values[option.key] for layer in tables])
    if option.kind is dict:
        value: Any = file_layer.values[option.key] if file_layer else {}
        source = f"{file_layer.where}:" if file_layer else option.key
    elif flags.get(option.name) == "" and option.flag and option.key != "system":
        # `--model "$MODEL"` with MODEL unset: the run would silently go on with another value
        raise ConfigError(f"{option.flag} needs a value (an empty one was given)")
    elif flags.get(option.name) is not None:
        value, source = flags[option.name], option.flag or option.key
    elif option.env and env.get(option.env, "") != "":
        value, source = env[option.env], option.env
    elif file_layer is not None and file_layer.values[option.key] != "":
        value, source = file_layer.values[option.key], f"{file_layer.where}: {option.key}"
    else:
        return option.default
    if option.kind is bool and isinstance(value, str):
        word = value.strip().lower()
        if word not in _BOOL_WORDS:
            raise ConfigError(f"{option.key} is not true or false: {value!r} (from {source})")
        value = _BOOL_WORDS[word]
    if option.kind in (int, float) and not isinstance(value, option.kind if option.kind is int else (int, float)):
        try:
            value = option.kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{option.key} is not a number: {str(value)!r} (from {source})") from None
    if option.check is not None and (problem := option.check(value)):
        raise ConfigError(f"{source} {problem}")
    return value


def _check_set_params(layers: list[_Layer], params: Mapping[str, Any]) -> None:
    """Refuse a configured `set_param` rule with no parameter to set (`wire.profile.unsent_set_param`)."""
    for layer in layers:
        provider = layer.values.get("provider")
        if isinstance(provider, dict) and provider.get("request_rules"):
            from .wire.rules.check import unsent_set_param

            if problem := unsent_set_param(provider["request_rules"], params):
                raise ConfigError(f"{layer.where}: {problem}")


def _home(layer: _Layer, layers: list[_Layer], env: Mapping[str, str]) -> str:
    """The server a file table's key (api_key_env) or credential headers are for: its own base_url, a
    profile's top-level one, else the server crow uses without one."""
    for table in (layer, layers[0]):
        if table.values.get("base_url"):
            return str(table.values["base_url"])
    return env.get("CROW_BASE_URL") or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL


class _UnsetKey(ConfigError):
    """The variable an applying `api_key_env` names is unset (kept in `Settings.api_key_problem`)."""


def _api_key(env: Mapping[str, str], layers: list[_Layer], base_url: str) -> str | None:
    """The key from the environment that was configured for `base_url`'s server, the first that applies of:

    - `--api-key KEY` (handled by the caller): the server of this run, whatever it is;
    - `CROW_API_KEY`: the server crow is set up for outside the command line and the profiles (`CROW_BASE_URL`,
      else the top-level `base_url`, else `OPENAI_BASE_URL`, else OpenAI);
    - `api_key_env = "NAME"` (top level or in a profile): the `base_url` of the same table (a profile without one:
      the top-level one; none at all: `CROW_BASE_URL`, `OPENAI_BASE_URL` or OpenAI); NAME unset or empty when it
      applies is a configuration error naming NAME (`_UnsetKey`, then `require_api_key`);
    - `OPENAI_API_KEY`: OpenAI's own API (api.openai.com), or the `OPENAI_BASE_URL` set beside it.

    Credential headers in the file follow the same rule as `api_key_env`.
    """
    server = key_server(base_url)
    crow_home = (env.get("CROW_BASE_URL") or layers[0].values.get("base_url") or env.get("OPENAI_BASE_URL")
                 or DEFAULT_BASE_URL)
    if env.get("CROW_API_KEY", "").strip() and key_server(crow_home) == server:
        return env["CROW_API_KEY"]
    named = next((layer for layer in reversed(layers) if layer.values.get("api_key_env", "") != ""), None)
    if named is not None and key_server(_home(named, layers, env)) == server:
        name = str(named.values["api_key_env"])
        if not env.get(name, "").strip():
            raise _UnsetKey(f"{name} is not set: api_key_env in {named.where} names it as the API key for "
                              f"{public_url(_home(named, layers, env))}")
        return env[name]
    openai_home = env.get("OPENAI_BASE_URL")
    if env.get("OPENAI_API_KEY", "").strip() and (
            server[1] == _OPENAI_HOST or (openai_home and key_server(openai_home) == server)):
        return env["OPENAI_API_KEY"]
    return None


def _secrets(flags: Mapping[str, Any], env: Mapping[str, str], tables: list[_Layer]) -> tuple[str, ...]:
    """The values of every key source and credential header the flags, environment and file name, and the
    credentials of the proxy variables (`text.proxy_secrets`: crow reads them too, `wire.proxy`)."""
    found: list[str | None] = [flags.get("api_key"), env.get("CROW_API_KEY"), env.get("OPENAI_API_KEY"),
                               *proxy_secrets(env)]
    for table in tables:
        name = table.values.get("api_key_env")
        found.append(env.get(name) if isinstance(name, str) else None)
        headers = table.values.get("headers")
        if isinstance(headers, dict):  # the value, "Bearer TOKEN"'s token, each cookie's value
            found += header_secrets({str(k): str(v) for k, v in headers.items()})
        servers = table.values.get("mcp_servers")
        for server in servers.values() if isinstance(servers, dict) else ():  # keys given to MCP servers
            if isinstance(server, dict) and isinstance(server.get("env"), dict):
                found += [str(v) for k, v in server["env"].items() if is_secret_name(str(k))]
            if isinstance(server, dict) and isinstance(server.get("url"), str):
                found += url_secrets(server["url"])
    return tuple(dict.fromkeys(v.strip() for v in found if isinstance(v, str) and v.strip()))


def require_api_key(settings: Settings) -> None:
    """Refuse to start a run whose key variable is unset, or against a hosted API (`wire.profiles`: one whose
    profile `needs_key`, e.g. `KEYED_HOSTS`) without
    a key: it would only answer 401.

    Called by the commands after every option is validated. A credential header from the config
    (`Authorization`, `api-key` …) counts as a key.

    Raises:
        ConfigError: `settings.api_key_problem`, or no key for such a server (exit 2).
    """
    if settings.api_key_problem:
        raise ConfigError(settings.api_key_problem)
    if settings.api_key or any(is_secret_name(name) for name in settings.headers):
        return
    host = (urlsplit(settings.base_url).hostname or "").lower()
    from .wire.profile import build_profile  # the built-in and config layers: what is known before learning

    if not build_profile(settings.base_url, settings.model, settings.provider, rules=False).needs_key:
        return
    hint = "set OPENAI_API_KEY or CROW_API_KEY, or pass --api-key" if host == _OPENAI_HOST else \
        "name the variable holding it with api_key_env beside base_url in the config, or pass --api-key"
    raise ConfigError(f"no API key for {public_url(settings.base_url)}: {hint} (or point --base-url at a server "
                      "that needs none, or try a small local model with --local)")
