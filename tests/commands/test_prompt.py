"""`crow prompt`'s command: what it prints, and why it prints no system prompt (crow's app in this process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import crow_here


# An empty --system-file is named as the reason there is no system prompt, with or without --no-default-prompt
# (the file replaces the built-in prompt whatever that flag says)
@pytest.mark.parametrize("flags", [[], ["--no-default-prompt"]])
def test_an_empty_system_file_is_named_as_the_reason(tmp_path: Path, flags: list[str],
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.md").write_text("")
    assert crow_here("prompt", *flags, "--system-file", "empty.md", "--no-project-instructions") == 0
    assert capsys.readouterr().err == ("crow: warning: the system prompt file 'empty.md' is empty: it replaces "
                                       "crow's built-in system prompt with nothing\n"
                                       "(no system prompt, and no AGENTS.md)\n")


def test_no_default_prompt_and_an_empty_system_are_named_as_the_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sys.md").write_text("Be brief.")
    for flags in (["--no-default-prompt"], ["--system", "", "--system-file", "sys.md"]):
        assert crow_here("prompt", *flags, "--no-project-instructions") == 0
        assert capsys.readouterr().err == ("(no system prompt: --no-default-prompt or --system \"\", and no "
                                           "AGENTS.md)\n")
