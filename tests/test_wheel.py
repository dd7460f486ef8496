"""The wheel, installed as a tool: built from the checkout, installed into a fresh venv (not editable), run.

What `pipx install .` / `uv tool install .` give: the package with its data (chat template, JSON
schemas, the JSONL event schema as in the checkout) and the `crow` script. The fresh venv borrows this
venv's third-party packages through a .pth line (a directory on sys.path, not a site dir: the editable
install's finder is not loaded), so crow_cli can only come from the wheel (only the build backend is
fetched, by pip's isolated build). Slow (a build): one test, the only one that builds the wheel, run
by CI with the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from crow_cli import __version__
from crow_cli.surfaces.jsonl import event_schema
from tests.replay_server import ReplayServer
from tests.support import ROOT, TOOLS, script

pytestmark = pytest.mark.slow


def test_the_built_wheel_runs_from_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # pip's isolated build env: the build backend pyproject.toml names, from PyPI (or pip's cache)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                    "-w", str(dist), str(ROOT)], check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("crow_cli-*.whl")
    # the JSONL event schema ships as it is in the checkout (the one build serves both checks)
    with zipfile.ZipFile(wheel) as zf:
        assert json.loads(zf.read("crow_cli/schemas/events.schema.json")) == event_schema()
    env_dir = tmp_path / "tool"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    "--disable-pip-version-check", str(wheel)], check=True, capture_output=True, timeout=300)
    crow = env_dir / "bin" / "crow"

    # crow_cli comes from the wheel, with its package data
    probe = ("import crow_cli, importlib.resources as r; f = r.files('crow_cli'); print(crow_cli.__file__); "
             "print((f / 'data' / 'llama-tools.jinja').is_file(), (f / 'schemas' / 'events.schema.json').is_file())")
    where, data = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True,
                                 cwd=tmp_path).stdout.splitlines()
    assert Path(where).is_relative_to(env_dir) and data == "True True"

    version = subprocess.run([crow, "--version"], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert version.stdout.strip() == f"crow {__version__}"

    # a replayed run: a plugin tool call, its result sent back, the answer, and JSONL events
    steps = script([("call_dice_1", "roll_dice", {"sides": 6, "count": 2})], final="You rolled them.")
    with ReplayServer(steps) as server:
        run = subprocess.run([crow, "run", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "m",
                              "--tools-dir", str(TOOLS), "--yes", "--no-session", "--json", "Roll two dice."],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert events[-1]["type"] == "run_finished" and events[-1]["final_text"] == "You rolled them."
    result = next(e["result"] for e in events if e["type"] == "tool_result")
    assert result["call_id"] == "call_dice_1" and result["output"].startswith("rolls: [")
    assert server.requests[1]["messages"][-1]["tool_call_id"] == "call_dice_1"
