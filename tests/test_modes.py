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


def declared_modes(name: str, source: str) -> list[str]:
    """Where `source` spells out approval, sandbox or reasoning-echo modes itself: a `Literal[…]` of two or more
    of one vocabulary's names, or a tuple, list or set of three or more (what `modes` declares once)."""
    import ast

    from crow_cli.modes import APPROVAL_MODES, REASONING_ECHO, SANDBOX_MODES

    def names(node: ast.AST) -> list[str]:
        items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            spelled, least = names(node.slice), 2
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            spelled, least = names(node), 3
        else:
            continue
        for vocabulary in (APPROVAL_MODES, SANDBOX_MODES, REASONING_ECHO):
            if len(spelled) >= least and set(spelled) <= set(vocabulary):
                found.append(f"{name} line {node.lineno}: {', '.join(spelled)}")
    return found


def test_the_modes_are_declared_once_in_modes() -> None:
    # the MCP tools' arguments, the order a continued session is held to, the config's and the sandbox's
    # Literals each spelled them out once, and crow_reply's copy had lost `plan`
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "crow_cli"
    found = [hit for path in sorted(package.rglob("*.py")) if path.name != "modes.py"
             for hit in declared_modes(str(path.relative_to(package)), path.read_text())]
    assert found == []
    spelled = 'A = Literal["read-only", "ask"]\nB = ("off", "read-only", "workspace-write")\nok = m in ("ask", "plan")'
    assert declared_modes("x.py", spelled) == ["x.py line 1: read-only, ask",
                                               "x.py line 2: off, read-only, workspace-write"]
