"""The trust question (`surfaces.hooks.trust_question`): asked once on a terminal, naming what the folder brings,
remembered; never asked without a terminal or when the folder brings nothing."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from crow_cli.config import Settings
from crow_cli.surfaces.hooks import load_hooks, trust_question
from crow_cli.trust import TrustStore, is_trusted


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".crow" / "skills").mkdir(parents=True)
    (root / ".crow" / "settings.toml").write_text('[[hooks.Stop]]\ncommand = "true"\n')
    (root / "src").mkdir()
    return root


def test_the_question_names_what_the_folder_brings_and_the_answer_is_remembered(tmp_path: Path) -> None:
    root = project(tmp_path)
    err = Terminal()
    assert trust_question(root / "src", stdin=Terminal("y\n"), err=err) is True
    asked = err.getvalue()
    assert str(root) in asked and ".crow/settings.toml (hooks" in asked and ".crow/skills" in asked
    assert is_trusted(root / "src") and TrustStore().decision(root) is True
    again = Terminal()
    assert trust_question(root, stdin=Terminal(""), err=again) is True and again.getvalue() == ""  # asked once


def test_no_is_remembered_and_nothing_is_asked_without_a_terminal(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert trust_question(root, stdin=io.StringIO("y\n"), err=Terminal()) is None  # stdin is no terminal
    assert TrustStore().decision(root) is None
    assert trust_question(root, stdin=Terminal(""), err=Terminal()) is False  # Ctrl-D: no, for this run only
    assert TrustStore().decision(root) is None
    assert trust_question(root, stdin=Terminal("\n"), err=Terminal()) is False  # Enter: the default, no
    assert not is_trusted(root) and TrustStore().decision(root) is False


def test_a_folder_that_brings_nothing_is_not_asked_about(tmp_path: Path) -> None:
    err = Terminal()
    assert trust_question(tmp_path, stdin=Terminal("y\n"), err=err) is None and err.getvalue() == ""


# `--approval plan` is told to hooks as `permission_mode` `plan`, never as `default` (Claude Code's ask)
@pytest.mark.parametrize(("approval", "told"), [("ask", "default"), ("auto-edit", "acceptEdits"),
                                                ("yolo", "bypassPermissions"), ("plan", "plan"), ("read-only", "plan")])
def test_hooks_are_told_the_approval_mode_by_claude_codes_name(tmp_path: Path, approval: str, told: str) -> None:
    settings = Settings(model="m", api_key="k", approval=approval,  # type: ignore[arg-type]
                        hooks={"PreToolUse": [{"command": "true"}]})
    hooks = load_hooks(settings, tmp_path, store=TrustStore(tmp_path / "trust.json"))
    assert hooks is not None and hooks.permission_mode == told
