"""Smoke: `crow probe` and `crow run --local` against the real llama.cpp server with SmolLM2.

Uses the xllamacpp engine and the cached model (`scripts/llama-server.sh prepare` fetches it; `.ci/run`
does); skipped, with the reason, when they are absent (a failure under CROW_SMOKE_REQUIRED=1, as in CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crow_cli.local import LocalServer, bundled_spec, local_paths
from tests.support import ROOT

pytestmark = [pytest.mark.smoke, pytest.mark.usefixtures("one_llama_at_a_time")]

CROW = str(Path(sys.executable).with_name("crow"))
# Read at import: the autouse fixture later swaps HOME and drops CROW_* variables for each test.
CACHE = os.environ.get("CROW_LLAMA_CACHE") or str(Path.home() / ".cache" / "crow")
REQUIRED = os.environ.get("CROW_SMOKE_REQUIRED") == "1"


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("CROW_LLAMA_CACHE", CACHE)
    monkeypatch.setenv("CROW_LLAMA_THREADS", "1")  # beside busy test workers, more threads wait spinning
    if not local_paths().ready():
        reason = f"no xllamacpp engine, or no cached model under {CACHE} (run scripts/llama-server.sh prepare)"
        (pytest.fail if REQUIRED else pytest.skip)(reason)
    return CACHE


@pytest.fixture
def llama_url(cache: str, tmp_path: Path) -> Iterator[str]:
    with LocalServer(bundled_spec(local_paths()), tmp_path) as server:
        yield server.base_url


# The budget is a hang bound, not a margin: idle, the probe takes seconds; with every core busy (CI runs two
# test workers per core) it took 217 s of a 240 s budget once, and a check cut by the budget fails the test.
@pytest.mark.timeout(1500)
def test_probe_reports_streamed_tool_calling(llama_url: str) -> None:
    proc = subprocess.run([CROW, "probe", "--base-url", llama_url, "--model", "smollm2", "--json",
                           "--budget", "1200"], capture_output=True, text=True, timeout=1400, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["tool calling"]["level"] == "ok", checks
    assert checks["round trip"]["level"] == "ok", checks
    assert checks["context window"]["seen"].startswith("4096 tokens (/props n_ctx)")
    assert not any("time budget" in c["seen"] for c in doc["checks"]), "every check ran within the budget"


def test_models_lists_the_local_model(llama_url: str) -> None:
    proc = subprocess.run([CROW, "models", "--base-url", llama_url, "--json"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    (model,) = json.loads(proc.stdout)
    assert model["id"].endswith(".gguf") and model["context_length"]


def test_run_local_answers_with_a_real_tool_call(cache: str, tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    proc = subprocess.run(
        [CROW, "run", "--local", "--yes", "--max-turns", "4", "--tools-dir", str(ROOT / "tools"), "--record",
         str(rec), "Please use roll_dice to roll one 20-sided die."],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "→ roll_dice(" in proc.stderr
    second = json.loads((rec / "0002-request.json").read_text())
    result = next(m for m in second["messages"] if m["role"] == "tool")
    assert result["content"].startswith("rolls: [")  # roll_dice really ran, and its result went back
    assert proc.stdout.strip(), "the model answered after the tool result"
