"""Plugin tools shipped as a package: loaded through a real `*.dist-info` entry point on sys.path."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from crow_cli.tools.registry import ToolRegistry
from tests.support import CROW

PLUGIN = '''
from crow_cli.tools import tool


@tool
def reverse(text: str) -> str:
    """Reverse some text.

    Args:
        text: what to reverse.
    """
    return text[::-1]


@tool(needs_approval=True, parallel=False)
def read_file(path: str) -> str:
    """A plugin tool whose name is taken by a built-in."""
    return path
'''

BROKEN = "raise ImportError('the plugin needs numpy')\n"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder laid out like site-packages: two packages, each with its dist-info and entry point."""
    for name, body in (("crow_reverse", PLUGIN), ("crow_broken", BROKEN)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
        info = tmp_path / f"{name}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[crow_cli.tools]\n{name.split('_')[1]} = {name}\n")
    return tmp_path


def test_entry_points_load_in_process(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(site))
    registry = ToolRegistry()
    registry.load_builtins()
    registry.load_entry_points()
    reverse = registry.get("reverse")
    assert reverse is not None and reverse.source == "entry point reverse"
    assert reverse.schema()["function"]["parameters"] == {"type": "object", "required": ["text"],
                                  "properties": {"text": {"type": "string", "description": "what to reverse."}}}
    assert registry.get("read_file").source == "builtin"
    assert registry.get("read_file_2").source == "entry point reverse"
    assert sorted(registry.errors) == [
        "tool 'read_file' from entry point reverse is named 'read_file_2': 'read_file' is taken (builtin)",
        "tool plugin 'broken' failed to load: ImportError: the plugin needs numpy",
    ]


def test_crow_tools_lists_entry_point_tools(site: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([str(CROW), "tools"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "reverse         Reverse some text.\n                source: entry point reverse\n" in proc.stdout
    assert "read_file_2" in proc.stdout
    assert "crow: warning: tool plugin 'broken' failed to load: ImportError: the plugin needs numpy\n" in proc.stderr
    assert "crow: warning: tool 'read_file' from entry point reverse is named 'read_file_2'" in proc.stderr
