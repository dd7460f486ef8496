"""`crow run --json`: the loop's typed events as JSON Lines on stdout, for scripts and CI.

Every stdout line is one ASCII JSON object, `dataclasses.asdict(event)`, with a `type`; the shapes are
`crow_cli/schemas/events.schema.json` (`version` = `events.SCHEMA_VERSION`, also `schema_version` in the first
event), fields added, never renamed or removed. Raw tool-call deltas are written only with `--debug`; `message`
events never. Errors are also printed as one line on stderr. The event order and what each means: docs/scripting.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from importlib import resources
from typing import Any, TextIO

from ..events import Event, MessageAppended, RunFinished, ToolCallDelta
from ..text import strip_controls
from .refusals import Refusals, refused_line

__all__ = ["JsonlWriter", "event_schema", "event_to_json"]


def event_to_json(event: Event) -> str:
    """One JSONL line (without the newline) for `event`: its `asdict` with `type` first, ASCII-only."""
    fields = asdict(event)
    inner = fields.get("event")  # a subagent's own event (`subagent_event`): shaped as the run's own are
    if isinstance(inner, dict):
        fields["event"] = {"type": inner.pop("type"), **inner}
    for result in (fields.get("result"), inner.get("result") if isinstance(inner, dict) else None):
        if isinstance(result, dict) and isinstance(result.get("images"), list | tuple):  # named, not written out
            result["images"] = [{"mime_type": i["mime_type"], "bytes": len(i["data"]), "name": i["name"]}
                                for i in result["images"]]
    return json.dumps({"type": fields.pop("type"), **fields}, ensure_ascii=True, default=str)


def event_schema() -> dict[str, Any]:
    """The shipped JSON Schema of the event lines (`crow_cli/schemas/events.schema.json`)."""
    text = resources.files("crow_cli").joinpath("schemas/events.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


class JsonlWriter:
    """Writes events to `out` as JSON Lines, flushing after each so pipes see them at once.

    Args:
        out: where events go (stdout); nothing else is ever written there.
        err: where the one-line error of a failed or interrupted run also goes (stderr).
        debug: also write raw `tool_call_delta` events.
    """

    def __init__(self, out: TextIO, err: TextIO, *, debug: bool = False) -> None:
        self.out = out
        self.err = err
        self.debug = debug
        self._refusals = Refusals()  # run_finished.changes_refused

    def handle(self, event: Event) -> None:
        event = self._refusals.saw(event)
        if isinstance(event, MessageAppended) or (isinstance(event, ToolCallDelta) and not self.debug):
            return
        self.out.write(event_to_json(event) + "\n")
        self.out.flush()
        if isinstance(event, RunFinished) and event.error:
            prefix = "crow: " if event.status == "cancelled" else "crow: error: "
            print(strip_controls(prefix + event.error), file=self.err, flush=True)
        if isinstance(event, RunFinished) and event.changes_refused:
            print(refused_line(event.changes_refused), file=self.err, flush=True)
