"""YAML front matter (`front_matter.split_front_matter`): read as other agents write it, refused in one line."""

from __future__ import annotations

import pytest

from crow_cli.errors import ConfigError
from crow_cli.front_matter import split_front_matter


def test_front_matter_is_read_as_yaml_and_the_body_follows() -> None:
    text = "---\nname: x\ndescription: >\n  Folded\n  text.\ntools: [a, b]\n---\n\n# Body\n"
    assert split_front_matter(text, "f") == ({"name": "x", "description": "Folded text.\n", "tools": ["a", "b"]},
                                             "# Body")
    assert split_front_matter("---\r\nname: x\r\n---\r\nBody", "f") == ({"name": "x"}, "Body")
    assert split_front_matter("---\n---\nBody", "f") == ({}, "Body")
    assert split_front_matter("No block.\n---\n", "f") == (None, "No block.\n---")


@pytest.mark.parametrize(("text", "why"), [
    ("---\nname: x\n", "f: its front matter has no closing '---' line"),
    ("---\nname: [x\n---\n",
     "f: its front matter is not valid YAML (line 3): expected ',' or ']', but got '<stream end>'"),
    ("---\n- a\n---\n", "f: its front matter is not a map of 'key: value' lines"),
    ("---\n!!python/object:os.system x\n---\n", "f: its front matter is not valid YAML"),
])
def test_a_bad_block_is_one_line(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as raised:
        split_front_matter(text, "f")
    assert str(raised.value).startswith(why) and "\n" not in str(raised.value)
