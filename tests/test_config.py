"""Settings precedence: flags > env > config file > defaults; profiles; bad config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crow_cli.config import DEFAULT_BASE_URL, DEFAULT_MODEL, default_config_path, load_settings, require_api_key
from crow_cli.errors import ConfigError
from tests.replay_server import ReplayServer
from tests.support import crow, text_sse


def write_config(text: str):
    path = default_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_without_anything():
    s = load_settings({}, env={})
    assert (s.model, s.base_url, s.api_key, s.max_turns) == (DEFAULT_MODEL, DEFAULT_BASE_URL, None, 25)


def test_precedence_flags_env_config():
    write_config('model = "from-file"\nbase_url = "http://file/v1"\nmax_turns = 7\n')
    env = {"CROW_MODEL": "from-env", "OPENAI_BASE_URL": "http://openai-env/v1"}
    s = load_settings({}, env=env)
    assert (s.model, s.base_url, s.max_turns) == ("from-env", "http://file/v1", 7)
    s = load_settings({"model": "from-flag", "max_turns": 3}, env=env)
    assert (s.model, s.max_turns) == ("from-flag", 3)
    assert load_settings({}, env={"CROW_BASE_URL": "http://crow/v1/"}).base_url == "http://crow/v1"


# `system_prompt_file` in a config file is relative to that file, not to the folder crow runs in
def test_a_config_files_system_prompt_file_is_relative_to_the_config(tmp_path, monkeypatch):
    config = write_config('system_prompt_file = "prompt.md"\n')
    monkeypatch.chdir(tmp_path)
    assert load_settings({}, env={}).system_prompt_file == str(config.parent / "prompt.md")
    assert load_settings({"system_prompt_file": "here.md"}, env={}).system_prompt_file == "here.md"  # the shell's


def test_api_key_lookup_order():
    write_config('api_key_env = "MY_KEY"\n')
    assert load_settings({}, env={"OPENAI_API_KEY": "o", "MY_KEY": "m"}).api_key == "m"
    assert load_settings({}, env={"MY_KEY": "m", "CROW_API_KEY": "c"}).api_key == "c"
    assert load_settings({"api_key": "f"}, env={"CROW_API_KEY": "c"}).api_key == "f"
    assert "sk-SECRET" not in repr(load_settings({"api_key": "sk-SECRET"}, env={}))


# A profile naming its key variable never falls back to OPENAI_API_KEY when that variable is unset
def test_a_named_key_variable_that_is_unset_is_an_error_not_a_fallback_to_openai_api_key():
    write_config('[profiles.other]\nbase_url = "https://other.example/v1"\napi_key_env = "OTHER_KEY"\n')
    env = {"OPENAI_API_KEY": "sk-openai", "CROW_API_KEY": "sk-crow"}
    with pytest.raises(ConfigError, match=r"^OTHER_KEY is not set: api_key_env in .*\[profiles\.other\] names it "
                       r"as the API key for https://other\.example/v1$") as caught:
        require_api_key(load_settings({}, env=env, profile="other"))
    assert caught.value.exit_code == 2
    assert load_settings({}, env=env, profile="other").api_key is None  # `crow tools` still lists
    assert load_settings({}, env={**env, "OTHER_KEY": "sk-other"}, profile="other").api_key == "sk-other"
    write_config('api_key_env = "MY_KEY"\n')  # top level, no base_url: the key for OpenAI, but MY_KEY is unset
    with pytest.raises(ConfigError, match=r"^MY_KEY is not set"):
        require_api_key(load_settings({}, env={"OPENAI_API_KEY": "o"}))


# Each key goes only to the server it was configured for
@pytest.mark.parametrize(("config", "flags", "env", "key"), [
    # OPENAI_API_KEY: OpenAI's own API, or the OPENAI_BASE_URL beside it; never another server
    ("", {}, {"OPENAI_API_KEY": "o"}, "o"),
    ("", {"base_url": "http://127.0.0.1:8080/v1"}, {"OPENAI_API_KEY": "o"}, None),
    ('base_url = "https://openrouter.ai/api/v1"\n', {}, {"OPENAI_API_KEY": "o"}, None),
    ("", {}, {"OPENAI_API_KEY": "o", "OPENAI_BASE_URL": "http://proxy:81/v1"}, "o"),
    ("", {}, {"OPENAI_API_KEY": "o", "CROW_BASE_URL": "http://other/v1"}, None),
    # CROW_API_KEY: CROW_BASE_URL, else the top-level base_url, else OpenAI; not a --base-url elsewhere
    ("", {}, {"CROW_API_KEY": "c", "CROW_BASE_URL": "http://mine:8080/v1"}, "c"),
    ("", {"base_url": "http://mine:8080/v2"}, {"CROW_API_KEY": "c", "CROW_BASE_URL": "http://mine:8080/v1"}, "c"),
    ("", {"base_url": "http://elsewhere/v1"}, {"CROW_API_KEY": "c", "CROW_BASE_URL": "http://mine:8080/v1"}, None),
    ('base_url = "http://file/v1"\n', {}, {"CROW_API_KEY": "c"}, "c"),
    ('base_url = "http://file/v1"\nprofile = "p"\n[profiles.p]\nbase_url = "http://p/v1"\n', {},
     {"CROW_API_KEY": "c"}, None),
    ('profile = "p"\n[profiles.p]\nmodel = "m"\n', {}, {"CROW_API_KEY": "c"}, "c"),  # same server
    # api_key_env: the base_url of its own table; a --base-url elsewhere gets nothing (and no error)
    ('base_url = "http://file/v1"\napi_key_env = "K"\n', {}, {"K": "k"}, "k"),
    ('base_url = "http://file/v1"\napi_key_env = "K"\n', {"base_url": "http://else/v1"}, {}, None),
    ('base_url = "http://file/v1"\napi_key_env = "K"\nprofile = "p"\n[profiles.p]\nbase_url = "http://p/v1"\n',
     {}, {"K": "k"}, None),
    ('base_url = "http://file/v1"\napi_key_env = "K"\nprofile = "p"\n[profiles.p]\nmodel = "x"\n',
     {}, {"K": "k"}, "k"),
    # --api-key: whatever server this run talks to
    ("", {"base_url": "http://anywhere/v1", "api_key": "f"}, {"OPENAI_API_KEY": "o"}, "f"),
])
def test_a_key_goes_only_to_the_server_it_was_configured_for(config, flags, env, key):
    write_config(config)
    assert load_settings(flags, env=env).api_key == key


# Credential headers go only to the server of the table that names them
def test_credential_headers_go_only_to_the_server_of_their_table():
    write_config('base_url = "http://file/v1"\n[headers]\nAuthorization = "Bearer t"\nX-Title = "crow"\n'
                 '[profiles.p]\nbase_url = "http://p/v1"\nheaders = { "x-api-key" = "pk", X-Title = "p" }\n')
    assert load_settings({}, env={}).headers == {"Authorization": "Bearer t", "X-Title": "crow"}
    assert load_settings({"base_url": "http://else/v1"}, env={}).headers == {"X-Title": "crow"}
    assert load_settings({}, env={}, profile="p").headers == {"x-api-key": "pk", "X-Title": "p"}
    assert load_settings({}, env={"CROW_BASE_URL": "http://else/v1"}, profile="p").headers == {"X-Title": "p"}
    assert "Bearer t" not in repr(load_settings({}, env={}))


def test_proxy_credentials_and_mcp_server_keys_are_secrets() -> None:
    # `HTTP_PROXY=http://user:password@…` reached every command and the model's `env | grep -i proxy` sent it
    write_config('[mcp_servers.gh]\ncommand = "gh-mcp"\nenv = { GITHUB_TOKEN = "ghp-123456789", LEVEL = "debug" }\n'
                 '[mcp_servers.docs]\nurl = "https://docs.test/mcp?key=doc-secret-1"\n')
    s = load_settings({"base_url": "http://127.0.0.1:9/v1"},
                      env={"HTTPS_PROXY": "http://proxyuser:pr0xy-pass@proxy.test:3128",
                           "all_proxy": "socks5://tok-as-user-1@proxy.test:1080", "http_proxy": "http://proxy.test:3128"})
    assert {"pr0xy-pass", "proxyuser:pr0xy-pass", "tok-as-user-1", "ghp-123456789", "doc-secret-1"} <= set(s.secrets)
    assert "debug" not in s.secrets and "proxyuser" not in s.secrets


# A key not sent to this server is still a secret (run_shell hides every one)
def test_every_configured_credential_is_a_secret_whether_sent_or_not():
    write_config('api_key_env = "K"\n[headers]\nAuthorization = "Bearer tok-123456"\n'
                 '[profiles.p]\napi_key_env = "PK"\n')
    s = load_settings({"base_url": "http://elsewhere/v1"},
                      env={"K": "k-secret", "PK": "pk-secret", "OPENAI_API_KEY": "o-secret", "CROW_API_KEY": " "})
    assert s.api_key is None and "secret" not in repr(s)
    assert set(s.secrets) == {"k-secret", "pk-secret", "o-secret", "Bearer tok-123456", "tok-123456"}


# A missing key for a hosted API is a configuration error, before any request
def test_a_hosted_api_without_a_key_is_a_config_error():
    require_api_key(load_settings({"base_url": "http://127.0.0.1:8080/v1"}, env={}))  # local: no key needed
    require_api_key(load_settings({}, env={"OPENAI_API_KEY": "o"}))
    with pytest.raises(ConfigError, match=r"^no API key for https://api\.openai\.com/v1: set OPENAI_API_KEY") as e:
        require_api_key(load_settings({}, env={}))
    assert e.value.exit_code == 2
    with pytest.raises(ConfigError, match=r"^no API key for https://openrouter\.ai/api/v1: name the variable"):
        require_api_key(load_settings({"base_url": "https://openrouter.ai/api/v1"}, env={"OPENAI_API_KEY": "o"}))


def test_profiles_override_top_level_and_unknown_profile_fails():
    write_config('model = "top"\nprofile = "fast"\n[profiles.fast]\nmodel = "quick"\nheaders = { X-A = "1" }\n'
                 '[profiles.slow]\nmodel = "big"\n')
    assert load_settings({}, env={}).model == "quick"
    s = load_settings({}, env={}, profile="slow")
    assert (s.model, s.profile) == ("big", "slow")
    assert load_settings({}, env={}).headers == {"X-A": "1"}
    with pytest.raises(ConfigError, match=r"unknown profile 'nope'.*fast, slow"):
        load_settings({}, env={}, profile="nope")


@pytest.mark.parametrize(("text", "message"), [
    ("model = ", "not valid TOML"),
    ("colour = 1\n", r"unknown key 'colour' in \S+; see"),  # nothing near it: no suggestion
    # a mistyped key gets the nearest valid one, as a mistyped flag does
    ("modle = 'x'\n", r"unknown key 'modle' in \S+config\.toml \(did you mean 'model'\?\); see"),
    ("max_turn = 3\n", r"\(did you mean 'max_turns'\?\)"),
    ("max_turns = 'many'\n", "'max_turns' has the wrong type"),
    # a bad value is reported as the file's key, not as the flag of the same setting
    ("max_turns = 0\n", r"^/.*/config\.toml: max_turns must be at least 1 \(got 0\)$"),
    ("max_retries = -1\n", r"config\.toml: max_retries must be 0 or more \(got -1\)$"),
    ("tool_timeout = 0\n", r"config\.toml: tool_timeout must be greater than 0"),
    ('base_url = "ftp://x"\n', r"config\.toml: base_url must start with http:// or https://"),
    # keys crow owns in the request body cannot be set from [params]
    ('[params]\nmodel = "x"\n', r"config\.toml: \[params\] cannot set 'model': crow sets"),
    ('[params]\nstream = false\n', r"\[params\] cannot set 'stream'"),
    ('[params]\nmessages = []\n', r"\[params\] cannot set 'messages'"),
    ('[params]\ntools = []\n', r"\[params\] cannot set 'tools'"),
    ('[params]\nstream_options = {}\n', r"\[params\] cannot set 'stream_options'"),
    ("allow = [42]\n", "'allow' must be a list of strings"),  # was accepted as the rule "42"
    ("tool_paths = ['a', 1]\n", "'tool_paths' must be a list of strings"),
])
def test_bad_config_is_a_config_error(text, message):
    write_config(text)
    with pytest.raises(ConfigError, match=message):
        load_settings({}, env={})


def test_explicit_missing_config_file_fails(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings({}, env={}, config_path=str(tmp_path / "nope.toml"))


def test_example_config_is_valid(tmp_path):
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "config.example.toml"
    s = load_settings({}, env={"OPENROUTER_API_KEY": "k"}, config_path=str(example), profile="openrouter")
    assert s.base_url == "https://openrouter.ai/api/v1" and s.headers == {"X-Title": "crow"}
    # The shipped profiles never receive the OpenAI key
    assert load_settings({}, env={"OPENAI_API_KEY": "k"}, config_path=str(example), profile="local").api_key is None
    with pytest.raises(ConfigError, match=r"^OPENROUTER_API_KEY is not set"):
        require_api_key(load_settings({}, env={"OPENAI_API_KEY": "k"}, config_path=str(example), profile="openrouter"))
    assert load_settings({}, env={"OPENAI_API_KEY": "k"}, config_path=str(example)).api_key == "k"


def test_a_bad_number_from_the_environment_names_the_variable():
    with pytest.raises(ConfigError, match=r"^idle_timeout is not a number: 'abc' \(from CROW_IDLE_TIMEOUT\)$"):
        load_settings({}, env={"CROW_IDLE_TIMEOUT": "abc"})


# A key's trailing newline is stripped; odd keys are refused, unechoed
def test_key_with_trailing_newline_is_stripped_and_odd_keys_are_refused_unechoed() -> None:
    with ReplayServer([{"sse": text_sse("ok")}]) as srv:
        proc = crow("run", "--base-url", srv.base_url, "--api-key", "sk-SECRET-1\n", "--no-tools", "hi")
        headers = srv.raw_requests[0]["headers"]
    assert proc.returncode == 0 and headers["Authorization"] == "Bearer sk-SECRET-1"
    proc = crow("run", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "sk-SECRÉT", "hi")
    assert proc.returncode == 2 and "SECR" not in proc.stderr and "API key" in proc.stderr


# A bad value in the config is a config error, exit 2
@pytest.mark.parametrize(("text", "message"), [
    ("max_retries = -1", "max_retries must be 0 or more"),
    ("idle_timeout = 0", "idle_timeout must be greater than 0"),
    ("tool_timeout = -5", "tool_timeout must be greater than 0"),
    ("[profiles]\nlocal = 5", "'profiles' must hold tables"),
    ("profiles = 5", "'profiles' must hold tables"),
    ('base_url = "localhost:9/v1"', "must start with http:// or https://"),
    # 1 would answer every first call "not run again", so nothing would run
    ("max_repeats = 1", r"max_repeats must be 0 \(never\) or at least 2 \(got 1\)"),
])
def test_bad_values_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load_settings({}, env={}, config_path=str(config), profile=None)
    assert caught.value.exit_code == 2


def test_a_bad_value_ends_crow_run_in_one_line_exit_2(tmp_path: Path) -> None:
    # the table above, through the CLI once: a ConfigError is one line and exit 2, never a traceback
    config = tmp_path / "c.toml"
    config.write_text("max_retries = -1\n")
    proc = crow("run", "--config", str(config), "hi")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "max_retries must be 0 or more" in proc.stderr
    assert "Traceback" not in proc.stderr


# A refused configured value names the table it came from ([params] or [profiles.NAME.params])
def test_settings_say_which_table_the_params_came_from(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[params]\ntemperature = 0.2\n[profiles.a]\nmodel = "ma"\n[profiles.b.params]\nseed = 1\n')
    assert load_settings({}, env={}, config_path=str(config)).params_from == f"[params] in {config}"
    assert load_settings({}, env={}, config_path=str(config), profile="a").params_from == f"[params] in {config}"
    chosen = load_settings({}, env={}, config_path=str(config), profile="b")
    assert (chosen.params, chosen.params_from) == ({"seed": 1}, f"[profiles.b.params] in {config}")
    config.write_text('model = "m"\n')
    assert load_settings({}, env={}, config_path=str(config)).params_from is None


# CROW_PROFILE beats the config file's profile
def test_crow_profile_env_beats_the_files_profile(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('profile = "a"\n[profiles.a]\nmodel = "ma"\n[profiles.b]\nmodel = "mb"\n')
    assert load_settings({}, env={"CROW_PROFILE": "b"}, config_path=str(config)).model == "mb"


def test_the_flag_is_named_when_its_value_is_refused():
    with pytest.raises(ConfigError, match=r"^--max-turns must be at least 1 \(got 0\)$"):
        load_settings({"max_turns": 0}, env={})


# A key in the base URL's query is a credential too
def test_a_key_in_the_base_url_query_is_a_secret():
    s = load_settings({"base_url": "http://h/v1?api-version=1&key=SK-query-123&sig=sig-456789"}, env={})
    assert {"SK-query-123", "sig-456789"} <= set(s.secrets) and "1" not in s.secrets


# A header value with a line break is a config error
@pytest.mark.parametrize("value", ['"a\\r\\nX-Evil: 1"', '"tok\\n"', '"a\\rb"'])
def test_a_header_with_a_line_break_is_a_config_error(value):
    write_config(f'[headers]\nX-Key = {value}\n')
    with pytest.raises(ConfigError, match="'X-Key' holds a line break") as caught:
        load_settings({}, env={})
    assert caught.value.exit_code == 2 and "Evil" not in str(caught.value) and "tok" not in str(caught.value)


def test_repair_tool_calls_off_turns_off_all_four_repairs_of_the_loop(tmp_path):
    # one switch for the bench's baseline (coercions, names by case, recovery, repeat guard)
    from crow_cli.surfaces.common import loop_settings

    on = loop_settings(load_settings({}, env={}))
    assert (on.repair_calls, on.recover_tool_calls, on.max_repeats) == (True, True, 3)
    off = loop_settings(load_settings({}, env={"CROW_REPAIR_TOOL_CALLS": "0"}))
    assert (off.repair_calls, off.recover_tool_calls, off.max_repeats) == (False, False, 0)
    path = tmp_path / "config.toml"
    path.write_text("repair_tool_calls = false\n")
    assert load_settings({}, env={}, config_path=str(path)).repair_tool_calls is False
    with pytest.raises(ConfigError, match=r"^repair_tool_calls is not true or false: .maybe. \(from CROW_REPAIR"):
        load_settings({}, env={"CROW_REPAIR_TOOL_CALLS": "maybe"})


def test_adapt_requests_from_the_file_and_the_environment(tmp_path):
    # request adaptation (wire.change) is easy to turn off
    assert load_settings({}, env={}).adapt_requests is True
    for word, value in (("0", False), ("off", False), ("FALSE", False), ("yes", True), ("1", True)):
        assert load_settings({}, env={"CROW_ADAPT_REQUESTS": word}).adapt_requests is value
    path = tmp_path / "config.toml"
    path.write_text("adapt_requests = false\n")
    assert load_settings({}, env={}, config_path=str(path)).adapt_requests is False
    assert load_settings({}, env={"CROW_ADAPT_REQUESTS": "1"}, config_path=str(path)).adapt_requests is True
    with pytest.raises(ConfigError, match=r"^adapt_requests is not true or false: .maybe. \(from CROW_ADAPT_REQ"):
        load_settings({}, env={"CROW_ADAPT_REQUESTS": "maybe"})
    path.write_text('adapt_requests = "no"\n')
    with pytest.raises(ConfigError, match="'adapt_requests' has the wrong type"):
        load_settings({}, env={}, config_path=str(path))


# run_shell commands are sandboxed by default; the mode is a setting (flag, env, file, profile)
def test_sandbox_mode_and_network_settings(tmp_path: Path) -> None:
    assert (load_settings({}, env={}).sandbox, load_settings({}, env={}).sandbox_network) == ("workspace-write", False)
    config = tmp_path / "c.toml"
    config.write_text('sandbox = "read-only"\nsandbox_network = true\n[profiles.ci]\nsandbox = "off"\n')
    s = load_settings({}, env={}, config_path=str(config))
    assert (s.sandbox, s.sandbox_network) == ("read-only", True)
    assert load_settings({}, env={}, config_path=str(config), profile="ci").sandbox == "off"
    assert load_settings({}, env={"CROW_SANDBOX": "off"}, config_path=str(config)).sandbox == "off"
    assert load_settings({"sandbox": "workspace-write"}, env={"CROW_SANDBOX": "off"}).sandbox == "workspace-write"
    with pytest.raises(ConfigError, match=r"^--sandbox must be one of workspace-write, read-only, off \(got 'on'\)$"):
        load_settings({"sandbox": "on"}, env={})
    config.write_text('sandbox_network = "yes"\n')
    with pytest.raises(ConfigError, match="'sandbox_network' has the wrong type"):
        load_settings({}, env={}, config_path=str(config))


# A bad approval policy in the config file is refused at load, naming the file and the policies
def test_a_bad_approval_policy_names_its_source_and_the_policies(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('approval = "auto-edit"\n[profiles.ci]\napproval = "sometimes"\n')
    assert load_settings({}, env={}, config_path=str(config)).approval == "auto-edit"
    assert load_settings({"approval": "read-only"}, env={}, config_path=str(config)).approval == "read-only"
    with pytest.raises(ConfigError, match=r"^.*c\.toml \[profiles\.ci\]: approval must be one of ask, auto-edit, "
                                          r"yolo, read-only, plan \(got 'sometimes'\)$"):
        load_settings({}, env={}, config_path=str(config), profile="ci")
    with pytest.raises(ConfigError, match=r"^--approval must be one of ask, auto-edit, yolo, read-only, plan "
                                          r"\(got .x.\)$"):
        load_settings({"approval": "x"}, env={})


# A setting with a fixed set of values is a Literal, and its decoding refuses anything else
def test_every_literal_setting_is_decoded_against_its_values() -> None:
    import typing
    from dataclasses import fields

    from crow_cli.config import OPTIONS, Settings

    def values(hint: object) -> list[object]:  # a Literal's values, also inside `Literal[…] | None`
        if typing.get_origin(hint) is typing.Literal:
            return list(typing.get_args(hint))
        return [v for arg in typing.get_args(hint) if typing.get_origin(arg) is typing.Literal
                for v in typing.get_args(arg)]

    hints = typing.get_type_hints(Settings)
    literal = {f.name: values(hints[f.name]) for f in fields(Settings) if values(hints[f.name])}
    assert set(literal) == {"approval", "sandbox", "reasoning_echo"}
    for option in OPTIONS:
        if option.name in literal:
            assert option.check is not None
            assert [option.check(v) for v in literal[option.name]] == [None] * len(literal[option.name])
            assert option.check("bogus") == f"must be one of {', '.join(literal[option.name])} (got 'bogus')"


@pytest.mark.parametrize("key", ["approval", "sandbox", "reasoning_echo"])
def test_a_bad_value_of_a_literal_setting_is_one_line_naming_where_it_came_from(tmp_path: Path, key: str) -> None:
    from crow_cli.config import OPTIONS

    option = next(o for o in OPTIONS if o.key == key)
    allowed = option.check("bogus") if option.check else None
    assert allowed is not None and allowed.startswith("must be one of ")
    config = tmp_path / "c.toml"
    config.write_text(f'{key} = "bogus"\n')
    sources = [(f"{config}: {key}", lambda: load_settings({}, env={}, config_path=str(config)))]
    if option.env:
        sources.append((option.env, lambda: load_settings({}, env={option.env or "": "bogus"})))
    if option.flag:
        sources.append((option.flag, lambda: load_settings({option.name: "bogus"}, env={})))
    for source, load in sources:
        with pytest.raises(ConfigError) as caught:
            load()
        assert str(caught.value) == f"{source} {allowed}"


def test_the_settings_values_are_those_their_owners_take() -> None:
    # the values the config accepts are those the approval policy, the sandbox and the client take (`modes`)
    from crow_cli.config import APPROVAL_MODES, REASONING_ECHO, SANDBOX_MODES
    from crow_cli.tools.approval import POLICIES
    from crow_cli.tools.sandbox import MODES
    from crow_cli.wire import outgoing

    assert (APPROVAL_MODES, SANDBOX_MODES, REASONING_ECHO) == (POLICIES, MODES, outgoing.REASONING_ECHO)


# A FIFO as the config file is refused in one line (opening it would block for good with no writer)
def test_a_fifo_as_the_config_file_is_refused_in_one_line(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"^config file .* is a FIFO \(named pipe\); give a regular file$"):
        load_settings({}, env={}, config_path=str(fifo))


# a config file saved as Latin-1 or UTF-16 is one line naming the file, not an internal error
@pytest.mark.parametrize("encoding", ["latin-1", "utf-16"])
def test_a_config_file_that_is_not_utf8_is_one_line_naming_it(encoding):
    path = default_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes('model = "café"\n'.encode(encoding))
    with pytest.raises(ConfigError, match=r"^config file '.*config\.toml' is not UTF-8 text") as error:
        load_settings({}, env={})
    assert "\n" not in str(error.value)
    proc = crow("tools", "--config", str(path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not UTF-8" in proc.stderr, proc.stderr


def test_a_utf8_config_file_with_a_byte_order_mark_is_read():
    path = default_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes('model = "café"\n'.encode("utf-8-sig"))
    assert load_settings({}, env={}).model == "café"


# an unknown CROW_PROFILE says where the name came from
def test_an_unknown_profile_names_where_it_was_chosen():
    write_config('[profiles.fast]\nmodel = "quick"\n')
    with pytest.raises(ConfigError, match=r"unknown profile 'nope' \(from CROW_PROFILE;"):
        load_settings({}, env={"CROW_PROFILE": "nope"})
    with pytest.raises(ConfigError, match=r"unknown profile 'nope' \(from --profile;"):
        load_settings({}, env={}, profile="nope")
    write_config('profile = "nope"\n[profiles.fast]\nmodel = "quick"\n')
    with pytest.raises(ConfigError, match=r"unknown profile 'nope' \(from 'profile' in .*config\.toml;"):
        load_settings({}, env={})


# A header name httpx refuses or a value that is not ASCII is a config error naming the header
@pytest.mark.parametrize(("line", "said"), [('"Bad Name" = "v"', "'Bad Name' is no header name"),
                                            ('"X:Y" = "v"', "'X:Y' is no header name"),
                                            ('X-U = "caf\\u00e9 sk-secret-99"', "'X-U' must be text of ASCII"),
                                            ("X-L = [1]", "'X-L' must be text of ASCII")])
def test_a_header_http_cannot_send_is_a_config_error(line, said):
    write_config(f"[headers]\n{line}\n")
    with pytest.raises(ConfigError, match=said) as caught:
        load_settings({}, env={})
    assert caught.value.exit_code == 2 and "secret" not in str(caught.value)
    write_config('[headers]\nX-Ok = "v"\nX-N = 5\n')
    assert load_settings({}, env={}).headers == {"X-Ok": "v", "X-N": "5"}


# An empty value given for a setting (`--model "$MODEL"` with MODEL unset) is an error naming the flag,
# not a silent fallback to the default
@pytest.mark.parametrize(("flags", "profile", "named"), [
    ({"model": ""}, None, "--model"), ({"base_url": ""}, None, "--base-url"), ({"approval": ""}, None, "--approval"),
    ({"sandbox": ""}, None, "--sandbox"), ({"workspace": ""}, None, "--workspace"),
    ({"local_model": ""}, None, "--local-model"), ({"api_key": ""}, None, "--api-key"), ({}, "", "--profile"),
])
def test_an_empty_flag_is_refused_naming_it(flags, profile, named):
    write_config('[profiles.p]\nmodel = "pm"\n')
    with pytest.raises(ConfigError, match=f"^{named} needs a value"):
        load_settings(flags, env={"CROW_MODEL": "m", "OPENAI_API_KEY": "o", "CROW_PROFILE": "p"}, profile=profile)


def test_an_empty_system_flag_means_no_system_prompt():
    write_config('system = "Be terse."\n')
    assert load_settings({}, env={}).system == "Be terse."
    assert load_settings({"system": ""}, env={}).system == ""


# An empty value in a profile counts as unset and leaves the top-level value (base_url, model) in place
def test_an_empty_value_in_a_profile_leaves_the_top_level_value():
    write_config('base_url = "http://a.example/v1"\nmodel = "top"\nmax_turns = 7\n'
                 '[profiles.p]\nbase_url = ""\nmodel = ""\n')
    settings = load_settings({}, env={}, profile="p")
    assert (settings.base_url, settings.model, settings.max_turns) == ("http://a.example/v1", "top", 7)


# found with the one above: an empty api_key_env was an error naming no variable (" is not set: api_key_env …");
# empty, it is unset, as any key of the file
def test_an_empty_api_key_env_counts_as_unset():
    write_config('base_url = "https://api.example.com/v1"\napi_key_env = "MY_KEY"\n[profiles.p]\napi_key_env = ""\n')
    assert load_settings({}, env={"MY_KEY": "k1"}, profile="p").api_key == "k1"
    write_config('base_url = "https://api.example.com/v1"\napi_key_env = ""\n')
    settings = load_settings({}, env={"CROW_API_KEY": "k2"})
    assert (settings.api_key, settings.api_key_problem) == ("k2", None)


def test_prices_per_model_are_read_in_dollars_per_million_tokens():
    # The cost beside token use comes from [prices."MODEL"]
    write_config('[prices."gpt-4o"]\ninput = 2.5\noutput = 10\ncached_input = 1.25\n')
    assert load_settings({}, env={}).prices == {"gpt-4o": {"input": 2.5, "output": 10.0, "cached_input": 1.25}}


@pytest.mark.parametrize(("text", "said"), [
    ('[prices."gpt-4o"]\ninput = "2.5"\n', "[prices.gpt-4o] input must be a number of US dollars per million tokens, "
                                           "0 or more (got '2.5')"),
    ('[prices."gpt-4.1"]\ninput = -1\n', '[prices."gpt-4.1"] input must be a number of US dollars per million'),
    ("[prices.m]\nprompt = 1\n", "[prices.m] has an unknown key 'prompt' (keys: input, output, cached_input)"),
    ("[prices]\nm = 3\n", "[prices.m] must be a table"),
    ("prices = 3\n", "'prices' has the wrong type (int)"),
])
def test_a_bad_price_is_a_one_line_config_error(text, said):
    write_config(text)
    with pytest.raises(ConfigError) as caught:
        load_settings({}, env={})
    assert said in str(caught.value) and "\n" not in str(caught.value)


# `[profiles.NAME.provider]` is layered key by key over the `[provider]` table, not replacing it whole
def test_a_profiles_provider_table_is_layered_key_by_key_over_the_top_level_one():
    write_config('[provider]\nneeds_key = true\nrefused_fields = ["x"]\n'
                 'request_rules = [{op = "drop_param", target = "seed"}, {op = "cap_param", target = "max_tokens", '
                 'value = 100}]\n'
                 '[profiles.p.provider]\nrefused_fields = ["y"]\n'
                 'request_rules = [{op = "cap_param", target = "max_tokens", value = 200}]\n')
    provider = load_settings({}, env={}, profile="p").provider
    assert provider["needs_key"] is True and provider["refused_fields"] == ["y"]
    from crow_cli.wire.profile import build_profile
    from crow_cli.wire.rules import CapParam, DropParam

    profile = build_profile("http://127.0.0.1:9/v1", "m", provider)
    assert profile.request_rules == (DropParam("seed"), CapParam("max_tokens", 200))  # the profile's cap wins
    assert load_settings({}, env={}).provider["request_rules"][1]["value"] == 100


# Malformed rules are refused, each in one line naming where it is
@pytest.mark.parametrize(("text", "message"), [
    ('[provider]\nrequest_rules = [{op = "drop_param", target = "seed"}, {op = "fold_role", target = "bogus"}]\n',
     r"^/.*/config\.toml: \[provider\] request_rules\[1\]: fold_role target must be system or developer"),
    ('[profiles.p.provider]\nrequest_rules = [{op = "rename_tools", value = "regex.*"}]\n',
     r"config\.toml \[profiles\.p\]: \[provider\] request_rules\[0\]: rename_tools value must be one of"),
    ('[provider]\nrequest_rules = [{op = "set_param", target = "temperature", value = 1}]\n',
     r"config\.toml: \[provider\] request_rules\[0\]: set_param changes temperature only where a request has it, "
     r"and \[params\] sets no temperature: to send it, set it in \[params\] \(temperature = 1\)$"),
    ('[provider]\nrequest_rules = [{op = "set_param", target = "seed", value = 1979-05-27}]\n[params]\nseed = 1\n',
     r"set_param value must be JSON"),
])
def test_a_provider_rule_that_cannot_act_is_a_config_error_naming_it(text, message):
    write_config(text)
    with pytest.raises(ConfigError, match=message):
        load_settings({}, env={}, profile="p" if "profiles.p" in text else None)


def test_a_set_param_of_a_parameter_the_chosen_profile_sets_is_taken():
    write_config('[provider]\nrequest_rules = [{op = "set_param", target = "temperature", value = 1}]\n'
                 '[profiles.p.params]\ntemperature = 0.2\n')
    assert load_settings({}, env={}, profile="p").provider["request_rules"][0]["value"] == 1
    with pytest.raises(ConfigError, match="set_param changes temperature"):
        load_settings({}, env={})


def test_the_web_table_and_the_background_limit_are_read_and_checked(tmp_path):
    """`[web]` takes allow_hosts (host names) and search_url (http(s)); anything else is one line, exit 2."""
    path = tmp_path / "c.toml"
    path.write_text('max_background_commands = 2\n[web]\nallow_hosts = ["localhost", "*.corp.example"]\n'
                    'search_url = "http://127.0.0.1:8888"\n')
    s = load_settings({}, env={}, config_path=str(path))
    assert s.web == {"allow_hosts": ["localhost", "*.corp.example"], "search_url": "http://127.0.0.1:8888"}
    assert s.max_background_commands == 2
    assert load_settings({}, env={}).web == {} and load_settings({}, env={}).max_background_commands == 4
    for body, message in (('[web]\nallow = ["x"]\n', "[web] has no key 'allow'"),
                          ('[web]\nallow_hosts = ["two words"]\n', "[web] allow_hosts must be a list of host"),
                          ('[web]\nallow_hosts = ["*"]\n', "[web] allow_hosts: '*' is not a host name"),
                          ('[web]\nallow_hosts = ["10.0.0.0/33"]\n', "[web] allow_hosts: '10.0.0.0/33' is not"),
                          ('[web]\nallow_hosts = ["https://x.example"]\n', "'https://x.example' is not a host"),
                          ('[web]\nsearch_url = "ftp://x"\n', "[web] search_url must be an http:// or https:// URL"),
                          ("max_background_commands = -1\n", "must be 0 or more")):
        path.write_text(body)
        with pytest.raises(ConfigError, match=re.escape(message)) as bad:
            load_settings({}, env={}, config_path=str(path))
        assert bad.value.exit_code == 2


def test_the_chat_table_takes_a_status_line_of_true_false_or_a_command(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    for value, read in (("true", True), ("false", False), ('""', ""), ("'~/bin/status'", "~/bin/status")):
        path.write_text(f"[chat]\nstatus_line = {value}\n")
        assert load_settings({}, env={}, config_path=str(path)).chat == {"status_line": read}
    assert load_settings({}, env={}).chat == {}
    for body, message in (("[chat]\nstatus = true\n", "[chat] has no key 'status'"),
                          ("[chat]\nstatus_line = 3\n", "[chat] status_line must be true, false or a shell command")):
        path.write_text(body)
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_settings({}, env={}, config_path=str(path))
