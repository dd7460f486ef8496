"""Defects found by trying crow as a new user; each failing input kept as a test."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from crow_cli.config import load_settings
from crow_cli.errors import ConfigError
from crow_cli.history import ToolCall
from crow_cli.tools.dispatch import dispatch
from crow_cli.tools.registry import ToolRegistry, tool
from tests.conftest import chunk, sse, text_sse, tool_delta
from tests.replay_server import ReplayServer
from tests.test_cli import CROW, crow, run_against


async def results_of(registry: ToolRegistry, *calls: ToolCall, timeout_s: float = 5.0):
    events = [e async for e in dispatch(list(calls), registry, timeout_s=timeout_s)]
    return {e.result.call_id: e.result for e in events if e.type == "tool_result"}


async def test_tool_raising_cancelled_error_gets_a_result_instead_of_hanging():
    @tool
    async def cancel_tool() -> str:
        """Raises CancelledError itself."""
        raise asyncio.CancelledError()

    registry = ToolRegistry()
    registry.register(cancel_tool)
    results = await asyncio.wait_for(results_of(registry, ToolCall("c", "cancel_tool", "{}")), 5)
    assert results["c"].output == "Error: cancel_tool raised CancelledError"


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()])
async def test_tool_raising_base_exceptions_gets_a_result(exc):
    def bad() -> str:
        """Exits."""
        raise exc

    registry = ToolRegistry()
    registry.register(tool(bad))
    results = await results_of(registry, ToolCall("c", "bad", "{}"))
    assert results["c"].output.startswith(f"Error: bad raised {type(exc).__name__}")


async def test_a_tools_own_timeout_error_is_not_reported_as_ours():
    @tool
    async def own_timeout() -> str:
        """Upstream timeout."""
        raise TimeoutError("upstream socket timed out")

    registry = ToolRegistry()
    registry.register(own_timeout)
    results = await results_of(registry, ToolCall("c", "own_timeout", "{}"))
    assert results["c"].output == "Error: own_timeout raised TimeoutError: upstream socket timed out"


async def test_undecodable_text_in_tool_output_is_made_sendable():
    @tool
    def listing() -> str:
        """A file name that was not UTF-8."""
        return "bad\udcff.txt"

    registry = ToolRegistry()
    registry.register(listing)
    results = await results_of(registry, ToolCall("c", "listing", "{}"))
    assert results["c"].output == "bad\ufffd.txt"
    results["c"].output.encode("utf-8")


def test_plugin_exiting_at_import_is_a_load_error(tmp_path):
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(5)\n")
    registry = ToolRegistry()
    registry.load_folder(tmp_path)
    assert len(registry) == 0 and "SystemExit" in registry.errors[0]


class Weird:
    """An arbitrary class: pydantic has no schema for it."""


def test_tool_with_an_undescribable_type_is_dropped_with_a_reason(tmp_path):
    def weird(w: Weird) -> str:
        """Takes something pydantic cannot describe."""
        return "x"

    registry = ToolRegistry()
    registry.register(tool(weird))
    assert registry.schemas() == []
    assert "weird" in registry.errors[0] and "dropped" in registry.errors[0]


def test_same_folder_twice_loads_once(tmp_path):
    from pathlib import Path

    tools_dir = Path(__file__).resolve().parent.parent / "tools"
    registry = ToolRegistry()
    registry.load_folder(tools_dir)
    registry.load_folder(str(tools_dir) + "/")
    assert sorted(t.name for t in registry) == ["current_time", "roll_dice"]


def test_sync_tool_past_its_timeout_does_not_keep_crow_alive(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "hang.py").write_text(textwrap.dedent('''
        import time
        from crow_cli.tools import tool

        @tool
        def hang() -> str:
            """Never returns in time."""
            time.sleep(60)
            return "late"
    '''))
    config = tmp_path / "c.toml"
    config.write_text("tool_timeout = 1\n")
    call = sse(chunk({"tool_calls": [tool_delta(0, "h1", "hang", "{}")]}), chunk({}, "tool_calls"))
    started = time.monotonic()
    proc, requests = run_against([{"sse": call}, {"sse": text_sse("gave up")}], "--config", str(config),
                                 "--tools-dir", str(plugins), "go", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "gave up\n"
    assert time.monotonic() - started < 40  # it used to wait the full 60 s for the thread
    assert "timed out after 1 s" in requests[1]["messages"][2]["content"]


def test_latin1_stdout_still_gets_the_answer():
    proc, _ = run_against([{"sse": text_sse("Eagle 🦅 done")}], "--no-tools", "hi",
                          env={"PYTHONIOENCODING": "latin-1"})
    assert proc.returncode == 0 and proc.stdout == "Eagle ? done\n"


def test_key_with_trailing_newline_is_stripped_and_odd_keys_are_refused_unechoed():
    with ReplayServer([{"sse": text_sse("ok")}]) as srv:
        proc = crow("run", "--base-url", srv.base_url, "--api-key", "sk-SECRET-1\n", "--no-tools", "hi")
        headers = srv.raw_requests[0]["headers"]
    assert proc.returncode == 0 and headers["Authorization"] == "Bearer sk-SECRET-1"
    proc = crow("run", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "sk-SECRÉT", "hi")
    assert proc.returncode == 2 and "SECR" not in proc.stderr and "API key" in proc.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("max_retries = -1", "max_retries must be 0 or more"),
    ("idle_timeout = 0", "idle_timeout must be greater than 0"),
    ("tool_timeout = -5", "tool_timeout must be greater than 0"),
    ("[profiles]\nlocal = 5", "'profiles' must hold tables"),
    ("profiles = 5", "'profiles' must hold tables"),
    ('base_url = "localhost:9/v1"', "must start with http:// or https://"),
])
def test_bad_values_are_config_errors(tmp_path, text, message):
    config = tmp_path / "c.toml"
    config.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message):
        load_settings({}, env={}, config_path=str(config), profile=None)
    proc = crow("run", "--config", str(config), "hi")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_crow_profile_env_beats_the_files_profile(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('profile = "a"\n[profiles.a]\nmodel = "ma"\n[profiles.b]\nmodel = "mb"\n')
    assert load_settings({}, env={"CROW_PROFILE": "b"}, config_path=str(config)).model == "mb"


def test_piped_stdin_goes_after_the_prompt():
    with ReplayServer([{"sse": text_sse("ok")}]) as srv:
        proc = subprocess.run(f"printf 'diff --git a b\\n' | '{CROW}' run --base-url {srv.base_url} --no-tools "
                              "'Review this diff'", shell=True, capture_output=True, text=True, timeout=60)
        body = srv.requests[0]
    assert proc.returncode == 0, proc.stderr
    assert body["messages"][-1]["content"] == "Review this diff\n\ndiff --git a b\n"


def test_text_of_consecutive_turns_is_not_glued_in_a_pipe(tmp_path):
    first = sse(chunk({"content": "Let me look."}),
                chunk({"tool_calls": [tool_delta(0, "l1", "list_directory", "{}")]}), chunk({}, "tool_calls"))
    proc, _ = run_against([{"sse": first}, {"sse": text_sse("All done.")}], "go", cwd=tmp_path)
    assert proc.stdout == "Let me look.\nAll done.\n"


def test_no_traceback_from_python_m():
    proc = subprocess.run([sys.executable, "-m", "crow_cli", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("crow ")
