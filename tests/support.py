"""Helpers for the scripting-surface tests: `crow` as a subprocess against the replay server, and a
scripted `loop.ChatStream` with a few tools for in-process loop properties."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from crow_cli.errors import ServerError, StreamCut
from crow_cli.history import Message
from crow_cli.tools import tool
from tests.conftest import chunk, sse, tool_delta
from tests.replay_server import ReplayServer

CROW = str(Path(sys.executable).with_name("crow"))
ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"


@dataclass
class Ran:
    """What one `crow run` did: exit code, output, and every request body the server received."""

    code: int
    stdout: str
    stderr: str
    requests: list[dict[str, Any]] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        """stdout as JSONL events, each validated against the shipped schema."""
        events = [json.loads(line) for line in self.stdout.splitlines()]
        validator = schema_validator()
        for event in events:
            validator.validate(event)
        return events


@cache
def schema_validator() -> Any:
    from jsonschema import Draft202012Validator

    from crow_cli.surfaces.jsonl import event_schema

    schema = event_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def write_config(folder: Path, **values: Any) -> Path:
    """A config file with top-level scalar keys (small retries and timeouts keep tests quick)."""
    path = folder / "crow.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    return path


def argv(base_url: str, *args: str, config: Path | None = None) -> list[str]:
    cfg = ["--config", str(config)] if config else []
    return [CROW, "run", "--base-url", base_url, "--api-key", "sk-test", "--model", "test-model", *cfg, *args]


def run_crow(script: list[dict[str, Any]], *args: str, cwd: Path, config: Path | None = None,
             timeout: float = 60) -> Ran:
    """Serve `script`, run `crow run … ARGS` in `cwd`, return what happened."""
    with ReplayServer(script) as server:
        proc = subprocess.run(argv(server.base_url, *args, config=config), capture_output=True, text=True,
                              cwd=cwd, timeout=timeout)
        return Ran(proc.returncode, proc.stdout, proc.stderr, list(server.requests))


def tool_turn(*calls: tuple[str, str, str]) -> str:
    """An SSE tool turn: (id, name, arguments) per call, opened together, arguments split in two."""
    opened = [tool_delta(i, cid, name, "") for i, (cid, name, _) in enumerate(calls)]
    pieces = []
    for i, (_, _, args) in enumerate(calls):
        half = len(args) // 2
        pieces += [chunk({"tool_calls": [tool_delta(i, arguments=args[:half])]}),
                   chunk({"tool_calls": [tool_delta(i, arguments=args[half:])]})]
    return sse(chunk({"role": "assistant", "content": None}), chunk({"tool_calls": opened}), *pieces,
               chunk({}, "tool_calls"))


def assert_contract(messages: list[dict[str, Any]]) -> None:
    """Each assistant tool call is followed by exactly one tool result per id, in call order."""
    i = 0
    while i < len(messages):
        msg = messages[i]
        assert msg.get("role") != "tool", f"stray tool message at {i}: {msg}"
        calls = msg.get("tool_calls") or [] if msg.get("role") == "assistant" else []
        for n, call in enumerate(calls):
            result = messages[i + 1 + n] if i + 1 + n < len(messages) else None
            assert result is not None and result.get("role") == "tool", f"call {call['id']!r} has no result"
            assert result["tool_call_id"] == call["id"], (result, call)
        i += 1 + len(calls)


@tool
async def ok(x: int = 0) -> str:
    """Answer at once."""
    return f"ok {x}"


@tool
async def boom() -> str:
    """Always fails."""
    raise RuntimeError("boom")


@tool
async def slow() -> str:
    """Runs past its timeout."""
    await asyncio.sleep(5)
    return "late"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _tool_chunks(calls: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [_chunk({"tool_calls": [{"index": i, "id": cid, "function": {"name": name, "arguments": "{}"}}]})
            for i, (cid, name) in enumerate(calls)] + [_chunk({}, "tool_calls")]


class ScriptedStream:
    """A `loop.ChatStream` that plays one scripted step per request (then plain text answers)."""

    def __init__(self, steps: list[tuple[Any, ...]]) -> None:
        self.steps = list(steps)

    async def stream(self, messages: list[Message], tools: list[dict[str, Any]] | None = None
                     ) -> AsyncIterator[dict[str, Any]]:
        assert_contract(messages)  # never is an invalid history sent
        kind, *rest = self.steps.pop(0) if self.steps else ("text",)
        await asyncio.sleep(0)
        if kind == "error":
            raise ServerError("server error (500): scripted")
        if kind == "text":
            yield _chunk({"content": "done"})
            yield _chunk({}, "stop")
        elif kind == "tools":
            for chunk in _tool_chunks(rest[0]):
                yield chunk
                await asyncio.sleep(0)
        elif kind == "cut":
            for chunk in _tool_chunks(rest[0])[:-1]:
                yield chunk
            raise StreamCut("the stream broke mid-way (scripted)")
