"""Shared fixtures: an isolated HOME for every test, SSE builders, the conformance cases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CASES_DIR = Path(__file__).parent / "cases"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME and the XDG dirs at a fresh folder and drop CROW_*/OPENAI_* variables."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for name, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                      ("XDG_STATE_HOME", ".local/state"), ("XDG_CACHE_HOME", ".cache")):
        monkeypatch.setenv(name, str(home / sub))
    import os

    for name in list(os.environ):
        if name.startswith(("CROW_", "OPENAI_")):
            monkeypatch.delenv(name)
    return home


def load_cases() -> list[dict[str, Any]]:
    """Every conformance case (tests/cases/*.json, copied from ../shared/conformance/cases)."""
    cases = []
    for f in sorted(CASES_DIR.glob("*.json")):
        case = json.loads(f.read_text())
        case.setdefault("id", f.stem)
        cases.append(case)
    return cases


def first_sse(case: dict[str, Any]) -> str:
    """The SSE body of the case's first streamed response."""
    if "sse" in case:
        return case["sse"]
    return next(r["sse"] for r in case["responses"] if "sse" in r)


def sse_chunks(body: str) -> Iterator[dict[str, Any]]:
    """Decode an SSE body into chunk dicts, for feeding the pure accumulator (test helper only)."""
    for line in body.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line.startswith("data:"):
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                yield json.loads(data)
            except ValueError:  # a damaged event: the frames after an embedded `data:`, as wire.stream recovers
                from crow_cli.wire.stream import recover_frames

                yield from recover_frames(data)


def sse(*chunks: dict[str, Any], done: bool = True) -> str:
    """An SSE body from chunk dicts (each becomes one `data:` event)."""
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return body + ("data: [DONE]\n\n" if done else "")


def chunk(delta: dict[str, Any] | None = None, finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    """One `chat.completion.chunk` with a single choice."""
    return {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "test-model",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}], **extra}


def tool_delta(index: int | None = None, id: str | None = None, name: str | None = None,
               arguments: Any = None) -> dict[str, Any]:
    """A `tool_calls[]` delta entry; None fields are left out."""
    entry: dict[str, Any] = {}
    if index is not None:
        entry["index"] = index
    if id is not None:
        entry["id"] = id
        entry["type"] = "function"
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if arguments is not None:
        fn["arguments"] = arguments
    if fn:
        entry["function"] = fn
    return entry


def text_sse(text: str) -> str:
    """A plain text answer, streamed in small pieces."""
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)] or [""]
    return sse(*(chunk({"content": p}) for p in pieces), chunk({}, "stop"))
