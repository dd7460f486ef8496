"""`crow run --json`: the loop's typed events as JSON Lines on stdout, for scripts and CI.

Every stdout line is one JSON object, `dataclasses.asdict(event)`, with a `type`. The shapes are
`crow_cli/schemas/events.schema.json` (JSON Schema 2020-12, `version` = `events.SCHEMA_VERSION`,
also sent as `schema_version` in the first event). Fields are added, never renamed or removed,
so consumers must ignore fields they do not know.

    run_started  → (text | reasoning | tool_call_started | warning | notice)*  → turn_finished
                 → (tool_call | tool_result)*  → … next turn …  → run_finished (always last)

* `text` and `reasoning` are deltas (pieces in arrival order), not whole blocks; `run_finished.final_text`
  is the whole answer of the last turn.
* `notice` with `code: "turn_restarted"`: the turn's stream broke and is being asked for again;
  drop the `text` / `reasoning` / `tool_call_started` events of that turn received so far.
* `notice` with `code: "retrying"`: the request failed before its stream started (429, 5xx, a
  connection error) and is sent again after `wait_s` seconds (`attempt`: its number, 2 = the first
  retry; `status`: the HTTP status, null for a connection error). `request_adapted` and `reasoning_echo`
  notices carry the refusal's HTTP `status` too. Other notices have these null.
* `tool_call.call.id` and `tool_result.result.call_id` are the model's ids, unchanged (`""` when it
  sent none; `index` then links a result to its call).
* `tool_result.result.output` is what the model was sent: capped at `max_output_chars` with a
  `[output truncated: …]` marker.
* A `task` call's subagent (`docs/subagents.md`) reports between the call's `tool_call` and its `tool_result`:
  `subagent_started`, its own `tool_call`, `tool_result`, `turn_finished` (its token use), `notice` and
  `warning` events each wrapped in a `subagent_event`, then `subagent_finished`; all carry the parent call's
  `call_id` and `index`. A `notice` with `code: "queued"` says a request waits for one of the server's
  slots (`max_concurrent_requests`).

Non-ASCII text is `\\u` escaped, so every line is plain ASCII whatever the locale. Raw tool-call
deltas (`tool_call_delta`) are written only with `--debug`; `message` events are not written.
Errors are also printed as one line on stderr.
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
