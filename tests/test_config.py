"""Settings precedence: flags > env > config file > defaults; profiles; bad config."""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.config import DEFAULT_BASE_URL, DEFAULT_MODEL, default_config_path, load_settings
from crow_cli.errors import ConfigError
from tests.conftest import text_sse
from tests.replay_server import ReplayServer
from tests.support import crow


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


def test_api_key_lookup_order():
    write_config('api_key_env = "MY_KEY"\n')
    assert load_settings({}, env={"OPENAI_API_KEY": "o"}).api_key == "o"
    assert load_settings({}, env={"OPENAI_API_KEY": "o", "MY_KEY": "m"}).api_key == "m"
    assert load_settings({}, env={"MY_KEY": "m", "CROW_API_KEY": "c"}).api_key == "c"
    assert load_settings({"api_key": "f"}, env={"CROW_API_KEY": "c"}).api_key == "f"
    assert "sk-SECRET" not in repr(load_settings({"api_key": "sk-SECRET"}, env={}))


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
    ("colour = 1\n", "unknown key 'colour'"),
    ("max_turns = 'many'\n", "'max_turns' has the wrong type"),
    ("max_turns = 0\n", "at least 1"),
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
    s = load_settings({}, env={"OPENAI_API_KEY": "k"}, config_path=str(example), profile="openrouter")
    assert s.base_url == "https://openrouter.ai/api/v1" and s.headers == {"X-Title": "crow"}


def test_a_bad_number_from_the_environment_names_the_variable():
    with pytest.raises(ConfigError, match=r"^idle_timeout is not a number: 'abc' \(from CROW_IDLE_TIMEOUT\)$"):
        load_settings({}, env={"CROW_IDLE_TIMEOUT": "abc"})


# found trying it as a new user
def test_key_with_trailing_newline_is_stripped_and_odd_keys_are_refused_unechoed() -> None:
    with ReplayServer([{"sse": text_sse("ok")}]) as srv:
        proc = crow("run", "--base-url", srv.base_url, "--api-key", "sk-SECRET-1\n", "--no-tools", "hi")
        headers = srv.raw_requests[0]["headers"]
    assert proc.returncode == 0 and headers["Authorization"] == "Bearer sk-SECRET-1"
    proc = crow("run", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "sk-SECRÉT", "hi")
    assert proc.returncode == 2 and "SECR" not in proc.stderr and "API key" in proc.stderr


# found trying it as a new user
@pytest.mark.parametrize(("text", "message"), [
    ("max_retries = -1", "max_retries must be 0 or more"),
    ("idle_timeout = 0", "idle_timeout must be greater than 0"),
    ("tool_timeout = -5", "tool_timeout must be greater than 0"),
    ("[profiles]\nlocal = 5", "'profiles' must hold tables"),
    ("profiles = 5", "'profiles' must hold tables"),
    ('base_url = "localhost:9/v1"', "must start with http:// or https://"),
])
def test_bad_values_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message):
        load_settings({}, env={}, config_path=str(config), profile=None)
    proc = crow("run", "--config", str(config), "hi")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


# found trying it as a new user
def test_crow_profile_env_beats_the_files_profile(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('profile = "a"\n[profiles.a]\nmodel = "ma"\n[profiles.b]\nmodel = "mb"\n')
    assert load_settings({}, env={"CROW_PROFILE": "b"}, config_path=str(config)).model == "mb"
