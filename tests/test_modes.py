"""The approval modes declared once: the note a later change appends, how it is known again, the Shift+Tab cycle."""

from __future__ import annotations

from crow_cli.history import is_prompt
from crow_cli.modes import APPROVAL_MODES, CYCLE, SENTENCES, is_mode_note, mode_note, next_mode, told_mode


def test_every_mode_has_the_sentence_the_model_reads_and_the_cycle_skips_yolo_and_read_only() -> None:
    assert set(SENTENCES) == set(APPROVAL_MODES) and "plan" in APPROVAL_MODES
    assert [next_mode(m) for m in CYCLE] == ["auto-edit", "plan", "ask"]
    assert next_mode("yolo") == next_mode("read-only") == "ask"


def test_the_last_note_of_a_history_names_the_mode_the_model_was_told_and_is_no_prompt() -> None:
    history = [{"role": "user", "content": "hi"}, mode_note("plan"), {"role": "assistant", "content": "ok"},
               mode_note("auto-edit"), {"role": "user", "content": "[crow: the approval mode is now sometimes: x]"}]
    assert told_mode(history) == "auto-edit" and told_mode(history[:1]) is None
    assert is_mode_note(history[1]) and not is_mode_note(history[0]) and not is_mode_note(history[-1])
    assert not is_prompt(history[1]) and is_prompt(history[0])
