"""`--local` (crow_cli/local.py) without the real engine: a stand-in `xllamacpp` package on PYTHONPATH.

The stand-in answers like llama.cpp's server (a Python HTTP server started by `Server(params)` on a
background thread, as xllamacpp does), and logs the parameters it was given: crow starts it in a child
process, runs against it and stops it. The real engine and model are exercised by the smoke tests
(tests/test_local_smoke.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from crow_cli.config import Settings
from crow_cli.errors import ConfigError
from crow_cli.local import LOCAL_MODEL, bundled_spec, gguf_spec, local_paths, local_session
from tests.support import alive, crow_here, wait_for

CROW = str(Path(sys.executable).with_name("crow"))
ROOT = Path(__file__).resolve().parents[1]

FAKE_ENGINE = textwrap.dedent('''\
    import json, os, threading
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from types import SimpleNamespace

    class CommonParams:
        def __init__(self):
            self.model = SimpleNamespace(path="")
            self.sampling = SimpleNamespace(temp=0.8, seed=-1)
            self.cpuparams = SimpleNamespace(n_threads=-1)
            self.cpuparams_batch = SimpleNamespace(n_threads=-1)
            self.chat_template = ""
            self.use_jinja = False
            self.hostnames = []
            self.port = 8080

    class Server:
        def __init__(self, params):
            if open(params.model.path, "rb").read(4) != b"GGUF":
                raise RuntimeError("failed to load model")
            with open(os.environ["FAKE_LOG"], "a") as log:
                log.write(json.dumps({"pid": os.getpid(), "model": params.model.path, "jinja": params.use_jinja,
                                      "template": params.chat_template[:40], "temp": params.sampling.temp,
                                      "seed": params.sampling.seed, "hosts": params.hostnames}) + "\\n")
            class H(BaseHTTPRequestHandler):
                def log_message(self, *a): pass
                def reply(self, code, body, ctype="application/json"):
                    data = body.encode()
                    self.send_response(code); self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
                def do_GET(self):
                    self.reply(200, '{"status": "ok"}') if self.path == "/health" else self.reply(404, "{}")
                def do_POST(self):
                    body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                    with open(os.environ["FAKE_LOG"], "a") as log:
                        log.write(json.dumps({"request": body, "auth": self.headers.get("authorization")}) + "\\n")
                    if os.environ.get("FAKE_HANG"):
                        with open(os.environ["FAKE_LOG"], "a") as log:
                            log.write(json.dumps({"hanging": True}) + "\\n")
                        threading.Event().wait()
                    chunk = {"choices": [{"index": 0, "delta": {"content": "Hello from the local model."},
                                          "finish_reason": "stop"}]}
                    self.reply(200, "data: " + json.dumps(chunk) + "\\n\\ndata: [DONE]\\n\\n", "text/event-stream")
            httpd = HTTPServer((params.hostnames[0], params.port), H)
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            self.listening_address = f"http://{params.hostnames[0]}:{httpd.server_address[1]}"
''')


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in engine on PYTHONPATH and the bundled model's file in the cache; returns the engine's log."""
    engine = tmp_path / "engine" / "xllamacpp"
    engine.mkdir(parents=True)
    (engine / "__init__.py").write_text(FAKE_ENGINE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(engine.parent), str(ROOT)]))
    monkeypatch.syspath_prepend(str(engine.parent))  # engine_installed() in this process
    monkeypatch.setenv("CROW_LLAMA_CACHE", str(tmp_path / "cache"))
    paths = local_paths()
    paths.model.parent.mkdir(parents=True)
    paths.model.write_bytes(b"GGUF")
    log = tmp_path / "fake.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    return log


def entries(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def crow_run(cwd: Path, capfd: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """What `crow run ARGS` does in `cwd`, crow's app in this process (`support.crow_here`; the engine's child
    process gets this process's environment, PYTHONPATH included). Killing crow needs a process (below)."""
    capfd.readouterr()
    with contextlib.chdir(cwd):
        code = crow_here("run", *args)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["crow", "run", *args], code, out, err)


def test_local_session_points_settings_at_the_server_and_stops_it(fake_engine: Path) -> None:
    said: list[str] = []
    with local_session(Settings(api_key="sk-hosted-key-1234"), progress=said.append) as settings:
        assert settings.base_url.startswith("http://127.0.0.1:") and settings.base_url.endswith("/v1")
        assert settings.model == LOCAL_MODEL and settings.api_key is None  # a hosted key never goes there
        (started,) = entries(fake_engine)
        os.kill(started["pid"], 0)  # running
    assert not alive(started["pid"])
    assert said == []  # nothing to prepare: no progress lines
    # the bundled model: crow's template, greedy sampling with a fixed seed, only on the loopback interface
    assert started["jinja"] and started["template"].startswith("{#- crow's chat template")
    assert started["temp"] == 0.0 and started["seed"] == 42 and started["hosts"] == ["127.0.0.1"]


def test_local_session_disabled_changes_nothing() -> None:
    original = Settings(base_url="http://example.test/v1")
    with local_session(original, enabled=False) as settings:
        assert settings is original


def test_crow_run_local_answers_from_the_local_server(fake_engine: Path, tmp_path: Path,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    proc = crow_run(tmp_path, capfd, "--local", "--no-tools", "Say hello.")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Hello from the local model."
    log = entries(fake_engine)
    request = next(e for e in log if "request" in e)
    assert request["request"]["model"] == LOCAL_MODEL and request["auth"] is None
    assert not alive(log[0]["pid"])  # stopped when the run ended


# "--local-model FILE.gguf runs any GGUF the user has, with the chat template from the GGUF"
def test_local_model_serves_the_users_gguf_with_its_own_template(fake_engine: Path, tmp_path: Path,
                                                                capfd: pytest.CaptureFixture[str]) -> None:
    gguf = tmp_path / "Qwen2.5-0.5B-Instruct-Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF")
    proc = crow_run(tmp_path, capfd, "--local-model", str(gguf), "--no-tools", "Say hello.")
    assert proc.returncode == 0, proc.stderr
    started = entries(fake_engine)[0]
    assert started["model"] == str(gguf) and started["jinja"] and started["template"] == ""
    request = next(e for e in entries(fake_engine) if "request" in e)
    assert request["request"]["model"] == "Qwen2.5-0.5B-Instruct-Q4_K_M"


def test_local_model_from_the_config_file(fake_engine: Path, tmp_path: Path,
                                          capfd: pytest.CaptureFixture[str]) -> None:
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    config = tmp_path / "config.toml"
    config.write_text(f"local_model = {json.dumps(str(gguf))}\n")
    proc = crow_run(tmp_path, capfd, "--local", "--config", str(config), "--no-tools", "Say hello.")
    assert proc.returncode == 0, proc.stderr
    assert entries(fake_engine)[0]["model"] == str(gguf)


def test_a_missing_local_model_is_one_line(fake_engine: Path, tmp_path: Path,
                                          capfd: pytest.CaptureFixture[str]) -> None:
    proc = crow_run(tmp_path, capfd, "--local-model", str(tmp_path / "nope.gguf"), "hi")
    assert proc.returncode == 1
    assert proc.stderr == f"crow: error: --local-model: no such file: {tmp_path / 'nope.gguf'}\n"


# --local-model pointing at a folder, or at a file that is no model (a download that saved an HTML page, an
# empty file), is one clear line from the file's magic, before llama.cpp starts
@pytest.mark.parametrize(("make", "said"), [
    (lambda p: p.mkdir(), "is a folder, not a GGUF model file"),
    (lambda p: p.write_bytes(b"<!DOCTYPE html><html>"), "is not a GGUF model file (it does not start with GGUF)"),
    (lambda p: p.write_bytes(b""), "is not a GGUF model file (it does not start with GGUF)"),
])
def test_a_local_model_that_is_no_gguf_file_is_one_line(fake_engine: Path, tmp_path: Path, make: Any, said: str,
                                                        capfd: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model.gguf"
    make(model)
    proc = crow_run(tmp_path, capfd, "--local-model", str(model), "hi")
    assert proc.returncode == 1
    assert proc.stderr == f"crow: error: --local-model: {model} {said}\n"
    assert not fake_engine.exists()  # no server was started


def test_a_server_that_fails_to_start_is_one_line(fake_engine: Path, tmp_path: Path,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    local_paths().model.write_bytes(b"not a model")
    proc = crow_run(tmp_path, capfd, "--local", "hi")
    assert proc.returncode == 1
    assert proc.stderr.startswith("crow: error: the local server exited (error: RuntimeError: failed to load "
                                  "model; log: ")
    assert "Traceback" not in proc.stderr


# "the server runs in a child process crow starts and stops: it must die with crow, also on SIGKILL"
def test_the_server_dies_with_crow_even_when_crow_is_killed(fake_engine: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_HANG", "1")  # the server holds the request: crow is mid-turn when killed
    crow = subprocess.Popen([CROW, "run", "--local", "--no-tools", "hi"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # crow is mid-turn: the request reached the server
        wait_for(lambda: fake_engine.exists() and '"hanging"' in fake_engine.read_text(), timeout=120)
        pid = entries(fake_engine)[0]["pid"]
        crow.send_signal(signal.SIGKILL)
        crow.wait()
        wait_for(lambda: not alive(pid), timeout=120)  # the child saw its stdin pipe close and exited
    finally:
        crow.kill()
        crow.wait()


# "with neither a key nor a base URL configured, crow's error message points to --local"
def test_no_key_and_no_base_url_points_to_local(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    proc = crow_run(tmp_path, capfd, "hi")
    assert proc.returncode == 2  # a configuration error, checked before any request
    assert "no API key for https://api.openai.com/v1" in proc.stderr and "--local" in proc.stderr


def test_module_command_check_and_paths(tmp_path: Path) -> None:
    env = {**os.environ, "CROW_LLAMA_CACHE": str(tmp_path / "empty")}
    assert subprocess.run([str(ROOT / "scripts" / "llama-server.sh"), "check"], env=env).returncode == 1
    out = subprocess.run([sys.executable, "-m", "crow_cli.local", "paths"], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == str(tmp_path / "empty" / "models" / "smollm2-135m-instruct-q4_1.gguf")
    assert Path(out[1]).is_file() and Path(out[1]).name == "llama-tools.jinja"  # shipped in the package


def test_without_the_engine_local_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a stand-in that cannot be imported hides the real engine from the check
    monkeypatch.setattr("crow_cli.local.ENGINE", "xllamacpp_that_is_not_installed")
    from crow_cli.local import LocalError, prepare

    with pytest.raises(LocalError, match=r"pip install xllamacpp"):
        prepare()


# the smoke tests ran llama.cpp with one thread per core beside three busy test workers: its threads waited for
# each other spinning and one probe took 185 s instead of 7 s. CROW_LLAMA_THREADS sets the number.
@pytest.mark.parametrize(("value", "threads"), [("1", 1), (" 3 ", 3), ("", max(1, min(4, os.cpu_count() or 2)))])
def test_the_generation_threads_come_from_crow_llama_threads(monkeypatch: pytest.MonkeyPatch, value: str,
                                                              threads: int) -> None:
    monkeypatch.setenv("CROW_LLAMA_THREADS", value)
    assert bundled_spec(local_paths()).threads == threads


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5", "²"])  # "²": str.isdigit, not int
def test_a_bad_thread_count_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CROW_LLAMA_THREADS", value)
    with pytest.raises(ConfigError, match="CROW_LLAMA_THREADS must be a whole number above 0"):
        bundled_spec(local_paths())


# every number `--local` reads from the environment is a usage error when not a number (and a port above
# 65535 is refused before llama.cpp sees it)
@pytest.mark.parametrize(("name", "value"), [("CROW_LLAMA_PORT", "abc"), ("CROW_LLAMA_PORT", "70000"),
                                             ("CROW_LLAMA_PORT", "-1"), ("CROW_LLAMA_MAX_TOKENS", "lots"),
                                             ("CROW_LLAMA_MAX_TOKENS", "0"), ("CROW_LLAMA_CTX", "8k")])
def test_a_bad_number_for_the_local_server_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             name: str, value: str) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(16))
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"^{name} must be"):
        bundled_spec(local_paths()) if name != "CROW_LLAMA_CTX" else gguf_spec(model)
    monkeypatch.setenv(name, " 4096 ")
    assert getattr(bundled_spec(local_paths()) if name != "CROW_LLAMA_CTX" else gguf_spec(model),
                   name.removeprefix("CROW_LLAMA_").lower()) == 4096


# `python -m crow_cli.local serve` ends on SIGTERM inside the one run scope, as crow run does
def test_serve_ends_on_sigterm_as_crow_run_does_and_stops_its_server(fake_engine: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "crow_cli.local", "serve"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("http://127.0.0.1:")  # serving
        (started,) = entries(fake_engine)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not alive(started["pid"])
    assert "stopped (SIGTERM)" in (proc.stderr.read() if proc.stderr else "")


def _rendered_prompt(tools: list[dict[str, Any]]) -> str:
    """The prompt crow's template makes of one user message and `tools`: jinja2's rendering is the one llama.cpp's
    server makes (its /apply-template gave the same text for these tools) once `tojson` leaves quotes unescaped,
    as llama.cpp's does (jinja2's escapes them for HTML)."""
    import jinja2  # a dev dependency: only these tests render templates

    env = jinja2.Environment()
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    template = env.from_string(local_paths().template.read_text(encoding="utf-8"))
    return str(template.render(messages=[{"role": "user", "content": "Please use list_directory."}], tools=tools,
                               add_generation_prompt=True))


# the template's example calls carry no values a small model copies (SmolLM2-135M searched for "example" in
# "example.txt" after `"pattern": "example"`, `"path": "."`)
@pytest.mark.parametrize("source", ["crow", "probe"])
def test_the_template_shows_no_argument_value_a_model_could_copy(source: str) -> None:
    from crow_cli.probe.checks import TOOLS as PROBE_TOOLS
    from crow_cli.tools.registry import default_registry

    tools = default_registry([str(ROOT / "tools")]).schemas() if source == "crow" else PROBE_TOOLS
    prompt = _rendered_prompt(tools)
    listed = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    names = [tool["function"]["name"] for tool in tools]
    assert [json.loads(line)["name"] for line in listed] == names
    for line in listed:  # each parameter is a name and a JSON type: no value, not even a type name as a string
        assert all(set(kind) == {"type"} for kind in json.loads(line)["parameters"].values()), line
    turns = prompt.split("<|im_start|>assistant\n<tool_call>\n")[1:]  # the example exchanges' calls
    calls = [json.loads(turn.split("\n</tool_call>", 1)[0]) for turn in turns]
    assert [call["name"] for call in calls] == names[:8]  # one example call per tool: tiny models need them
    assert all(call["arguments"] == {} for call in calls), calls
    for value in ('"example"', '"a"', '"."'):
        assert value not in prompt
