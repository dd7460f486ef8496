"""Servers' wording in one table (`wire.wording`).

Properties guarded here:

- every kind a reader names is in the table, every row says where its words were seen, and no row is read by
  nobody;
- the OpenAI overflow sentence is one row: the overflow numbers and the room a prompt leaves read it alike.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from crow_cli.wire import wording
from crow_cli.wire.change import change_for
from crow_cli.wire.rules import CapParam

WIRE = Path(wording.__file__).parent
_READ = re.compile(r"""wording\.(?:said|found|patterns)\(((?:\s*"[a-z_]+",?)+)""")


def _kinds_read() -> set[str]:
    kinds: set[str] = set()
    for path in WIRE.rglob("*.py"):
        for call in _READ.finditer(path.read_text()):
            kinds.update(re.findall(r'"([a-z_]+)"', call.group(1)))
    return kinds | {"context_overflow", "overflow_numbers", "overflow_requested", "overflow_window",
                    "overflow_prompt"}  # read by wording itself, for the client's overflow reading


def test_every_kind_read_is_in_the_table_with_its_source_and_every_row_is_read() -> None:
    table = {row.kind for row in wording.WORDING}
    read = _kinds_read()
    assert read - table == set()
    assert table - read == set()
    assert all(row.source.strip() for row in wording.WORDING)


OPENAI_OVERFLOW = ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (1000 in "
                   "the messages, 4000 in the completion). Please reduce the length of the messages or completion.")


def test_the_openai_overflow_sentence_is_one_row_read_alike_for_numbers_and_room() -> None:
    (row,) = [r for r in wording.WORDING if r.pattern.search(OPENAI_OVERFLOW) and "window" in r.pattern.groupindex]
    pattern, window, prompt = next(n for n in wording.OVERFLOW_NUMBERS if n[0].search(OPENAI_OVERFLOW))
    assert pattern is row.pattern
    found = pattern.search(OPENAI_OVERFLOW)
    assert found is not None and (int(found[window]), int(found[prompt])) == (4096, 1000)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 4000}
    change = change_for(400, json.dumps({"error": {"message": OPENAI_OVERFLOW}}), body)
    assert change is not None and change.rules == (CapParam("max_tokens", 4096 - 1000),) and change.once
