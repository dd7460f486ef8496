"""YAML front matter: the `---` block at the top of a Markdown file (SKILL.md, Claude Code's agent and command files).

    ---
    name: pdf-forms
    description: >
      Fill in PDF forms.
    allowed-tools: Read, Bash
    ---
    The body …

The block is read with PyYAML's safe loader (plain data only: no tags that build objects), so what other tools
write (quoted strings, folded `>` text, lists) reads as it does there. PyYAML is imported only when a file has a
block. Standard library and PyYAML only.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import ConfigError

__all__ = ["FrontMatter", "split_front_matter"]

_BLOCK = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?$\n?", re.DOTALL | re.MULTILINE)
_EMPTY = re.compile(r"\A---[ \t]*\r?\n---[ \t]*\r?$\n?", re.MULTILINE)

FrontMatter = dict[str, Any]
"""The block's keys and values (strings, numbers, lists, maps, as YAML gives them)."""


def split_front_matter(text: str, what: str) -> tuple[FrontMatter | None, str]:
    """`text` split into its front matter and the body after it (stripped).

    Args:
        text: the file's text.
        what: names the file in the error (`skill file '/p/SKILL.md'`).

    Returns:
        (None, text stripped) when the text does not start with a `---` line; else (the block's keys, the body).
        An empty block is an empty map.

    Raises:
        ConfigError: the block is not closed by a `---` line, is not valid YAML, or is not a map of keys.
    """
    if not re.match(r"\A---[ \t]*\r?\n", text):
        return None, text.strip()
    if (empty := _EMPTY.match(text)) is not None:
        return {}, text[empty.end():].strip()
    match = _BLOCK.match(text)
    if match is None:
        raise ConfigError(f"{what}: its front matter has no closing '---' line")
    import yaml

    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"{what}: its front matter is not valid YAML{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(f"{what}: its front matter is not a map of 'key: value' lines")
    return data, text[match.end():].strip()
