"""Cutting long text for people and models: the head and the tail stay, a marker says what was cut."""

from __future__ import annotations

__all__ = ["clip_middle"]


def clip_middle(text: str, max_chars: int, max_lines: int | None = None) -> str:
    """`text` unchanged when it fits; else its start and its end around a marker line saying how much was cut.

    The tail is always shown (the end of a command line runs last; a test run's summary comes last).
    About two thirds of the room go to the head, one third to the tail.

    Args:
        text: what to show.
        max_chars: characters of `text` kept at most (the marker comes on top).
        max_lines: lines kept at most; None: no line limit.

    Returns:
        e.g. `"head…\\n[… 120 lines, 5400 characters not shown …]\\n…tail"`.
    """
    lines = text.splitlines(keepends=True)
    if len(text) <= max_chars and (max_lines is None or len(lines) <= max_lines):
        return text
    tail_chars = max_chars // 3
    head_lines = len(lines) if max_lines is None else max_lines - max_lines // 3
    tail_lines = len(lines) if max_lines is None else max_lines // 3
    head = "".join(lines[:head_lines])[: max_chars - tail_chars]
    tail = "".join(lines[len(lines) - tail_lines:]) if tail_lines else ""
    tail = tail[len(tail) - tail_chars:] if len(tail) > tail_chars else tail
    hidden = text[len(head): len(text) - len(tail)]
    breaks = hidden.count("\n")
    marker = f"[… {breaks} line{'' if breaks == 1 else 's'}, {len(hidden)} characters not shown …]"
    return f"{head}{'' if head.endswith(chr(10)) or not head else chr(10)}{marker}\n{tail}"
