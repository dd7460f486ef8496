"""Property: any re-chunking of a valid tool-call stream assembles the same calls.

Arguments split anywhere, parallel indices interleaved, `""` id/name continuations, several deltas
in one chunk and usage-only chunks inserted anywhere: `StreamAccumulator` must give back the same
ids, names and arguments, in call order.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from crow_cli.wire.accumulate import StreamAccumulator

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
names = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)


@st.composite
def tool_calls(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """1–4 calls with distinct non-empty ids, names and JSON-object arguments (possibly `{}`)."""
    count = draw(st.integers(1, 4))
    ids = draw(st.lists(st.from_regex(r"call_[A-Za-z0-9]{1,10}", fullmatch=True), min_size=count, max_size=count,
                        unique=True))
    return [(ids[i], draw(names), json.dumps(draw(st.dictionaries(st.text(max_size=8), json_values, max_size=4)),
                                             ensure_ascii=draw(st.booleans())))
            for i in range(count)]


def _split(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=6)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def rechunked(draw: st.DrawFn) -> tuple[list[tuple[str, str, str]], list[dict[str, Any]]]:
    """The calls, and one of the many chunk sequences that stream them."""
    calls = draw(tool_calls())
    per_call: list[list[dict[str, Any]]] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        pieces = _split(draw, arguments)
        first_args = pieces.pop(0) if draw(st.booleans()) else ""
        deltas = [{"index": index, "id": call_id, "type": "function",
                   "function": {"name": name, "arguments": first_args}}]
        for piece in pieces:
            delta: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if draw(st.booleans()):  # DashScope-style empty continuations
                delta["id"] = ""
                delta["function"]["name"] = ""
            if draw(st.booleans()):
                delta["type"] = "function"
            deltas.append(delta)
        per_call.append(deltas)
    # interleave: any order that keeps each call's own order and opens calls in index order
    order: list[dict[str, Any]] = []
    cursors = [0] * len(calls)
    while any(c < len(d) for c, d in zip(cursors, per_call, strict=True)):
        ready = [i for i, d in enumerate(per_call) if cursors[i] < len(d) and (cursors[i] > 0 or i == 0
                 or cursors[i - 1] > 0)]
        i = draw(st.sampled_from(ready))
        order.append(per_call[i][cursors[i]])
        cursors[i] += 1
    # group consecutive deltas into chunks; sprinkle usage-only chunks
    chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": None},
                                                  "finish_reason": None}]}]
    position = 0
    while position < len(order):
        size = draw(st.integers(1, 3))
        group = order[position:position + size]
        if len({d["index"] for d in group}) < len(group):  # one entry per index in a single delta
            group = group[:1]
        position += len(group)
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": group}, "finish_reason": None}]})
        if draw(st.integers(0, 4)) == 0:
            chunks.append({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": position}})
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    if draw(st.booleans()):
        chunks.append({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}})
    return calls, chunks


@settings(max_examples=150, deadline=None)
@given(rechunked())
def test_any_rechunking_assembles_the_same_calls(case: tuple[list[tuple[str, str, str]], list[dict[str, Any]]]) -> None:
    calls, chunks = case
    accumulator = StreamAccumulator()
    for chunk in chunks:
        accumulator.feed(chunk)
    turn, _ = accumulator.finish()
    assert [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls] == \
        [(i, n, json.loads(a)) for i, n, a in calls]
    assert [c.index for c in turn.tool_calls] == list(range(len(calls)))
    assert turn.finish_reason == "tool_calls" and turn.content is None
