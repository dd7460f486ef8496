"""The status line's setting and built-in text (`surfaces.chat.status`); what the screen shows is in
test_app_screen.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.surfaces.chat.status import StatusInfo, builtin_line, status_setting
from crow_cli.trust import TrustStore


def _info(**changes: object) -> StatusInfo:
    values: dict[str, object] = {"model": "m", "mode": "plan", "session_id": "abc", "cwd": "/w",
                                 "context_tokens": 3456, "context_window": 128_000}
    return StatusInfo(**{**values, **changes})  # type: ignore[arg-type]


def test_the_builtin_line_shows_a_share_of_a_known_window_else_tokens() -> None:
    assert builtin_line(_info()) == "m · plan · 2% of 128.0k context · session abc"
    assert builtin_line(_info(context_window=None, session_id=None)) == \
        "m · plan · 3.5k tokens of context · new session"
    assert builtin_line(_info(session_id=None, recorded=False)).endswith(" · not recorded")
    assert builtin_line(_info(model="m\x1b[2J")).startswith("m[2J · ")  # a server's model name drives nothing


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".crow").mkdir()
    (root / ".crow" / "settings.toml").write_text("[chat]\nstatus_line = 'touch owned'\n")
    return root


def test_an_untrusted_projects_status_line_command_is_not_taken(project: Path, tmp_path: Path) -> None:
    warned: list[str] = []
    setting = status_setting({"status_line": "mine"}, "/home/me/config.toml", project,
                             store=TrustStore(tmp_path / "trust.json"), warn=warned.append)
    assert setting == ("mine", "/home/me/config.toml")
    assert warned == [f"the status line command in {project / '.crow' / 'settings.toml'} does not run: this folder "
                      "is not trusted"]


def test_a_trusted_projects_status_line_replaces_the_config_files(project: Path, tmp_path: Path) -> None:
    store = TrustStore(tmp_path / "trust.json")
    store.set(project, True)
    assert status_setting({"status_line": "mine"}, None, project / "sub", store=store) == (
        "touch owned", str(project.resolve() / ".crow" / "settings.toml"))
    (project / ".crow" / "settings.toml").write_text("[chat]\nstatus_line = ''\n")  # "" hides it
    assert status_setting({}, None, project, store=store)[0] is False


def test_without_a_setting_the_builtin_line_is_shown(tmp_path: Path) -> None:
    assert status_setting({}, None, tmp_path, store=TrustStore(tmp_path / "trust.json")) == (True, "")


def test_the_trust_question_names_a_projects_status_line_command(project: Path) -> None:
    from crow_cli.surfaces.hooks import project_brings

    assert project_brings(project) == [".crow/settings.toml (a status line command crow chat runs as you)"]
