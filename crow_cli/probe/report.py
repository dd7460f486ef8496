"""The probe's findings as one report: a line per check (✓ / ⚠ / ✗), or one JSON document.

The JSON document follows `crow_cli/schemas/probe.schema.json`. Text from the server (model names,
error messages) is cleaned of control characters before it reaches a terminal.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from ..text import clean_text, public_url, strip_controls
from .classify import Finding

__all__ = ["Check", "CheckLevel", "Report", "probe_schema", "render_text", "shown", "use_colour"]

CheckLevel = Literal["ok", "warn", "fail", "skip"]
MARKS = {"ok": "✓", "warn": "⚠", "fail": "✗", "skip": "-"}
_COLOURS = {"ok": "32", "warn": "33", "fail": "31", "skip": "2"}


@dataclass
class Check:
    """One line of the report.

    Attributes:
        name: what was checked (`reachable`, `tool calling` …); stable, used as the JSON key.
        level: `ok`, `warn` (works, with a caveat crow handles), `fail` or `skip` (not run).
        seen: what the server did, in a few words.
        crow: what crow does about it ("" when nothing needs saying).
    """

    name: str
    level: CheckLevel
    seen: str
    crow: str = ""


@dataclass
class Report:
    """Everything one probe found about one base URL and model."""

    base_url: str
    model: str
    checks: list[Check] = field(default_factory=list)
    shape: list[Finding] = field(default_factory=list)
    """The stream-shape findings of the tool-call requests (`classify`), each code once."""
    facts: dict[str, Any] = field(default_factory=dict)
    """What is remembered for later runs (`wire.facts`)."""
    elapsed_s: float = 0.0
    tool_calling: bool = False
    """True when at least one request produced a streamed tool call."""
    tool_probe: dict[str, str] | None = None
    """`crow probe --tools`: the outcome of each point answered (`wire.profile.TOOL_POINTS` key ->
    `TOOL_OUTCOMES` code); None for the battery."""

    def runs_tools(self) -> bool:
        """Whether a call crow runs came back: a streamed one (the battery), or a point of `--tools` with a
        native or a recovered call."""
        if self.tool_probe is not None:
            return any(v in ("native", "recovered") for v in self.tool_probe.values())
        return self.tool_calling

    def exit_code(self) -> int:
        """0 when tool calling works at all (`runs_tools`), else 1."""
        return 0 if self.runs_tools() else 1

    def to_json(self) -> dict[str, Any]:
        """The `--json` document (see `crow_cli/schemas/probe.schema.json`)."""
        from .. import __version__

        return {
            "crow_version": __version__,
            "base_url": public_url(self.base_url),
            "model": self.model,
            "elapsed_s": round(self.elapsed_s, 3),
            "tool_calling": self.tool_calling,
            "exit_code": self.exit_code(),
            "checks": [asdict(c) for c in self.checks],
            "shape": [asdict(f) for f in self.shape],
            "facts": self.facts,
        }


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never with `NO_COLOR` set or `TERM=dumb`."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def shown(text: str) -> str:
    """Server text made safe for one terminal line: surrogates paired, control characters and newlines gone."""
    return " ".join(strip_controls(clean_text(text)).split())


def _line(level: CheckLevel, name: str, seen: str, crow: str, colour: bool, indent: str = "") -> str:
    mark = MARKS[level]
    if colour:
        mark = f"\x1b[{_COLOURS[level]}m{mark}\x1b[0m"
    text = f"{indent}{mark} {name}: {shown(seen)}"
    if crow:
        text += f" (crow: {shown(crow)})"
    return text


def render_text(report: Report, out: TextIO | None = None, *, remembered: bool = True) -> None:
    """Write the report, one line per check, the stream shape indented under `stream shape`; `remembered`:
    whether what it found was stored for later runs (`wire.facts.learn`)."""
    out = out or sys.stdout
    colour = use_colour(out)
    print(f"crow probe: {shown(public_url(report.base_url))}  model {shown(report.model)}", file=out)
    for check in report.checks:
        print(_line(check.level, check.name, check.seen, check.crow, colour), file=out)
        if check.name == "stream shape":
            for f in report.shape:
                level: CheckLevel = f.level
                print(_line(level, f.label, f.seen, f.crow, colour, indent="    "), file=out)
    learned = {k: v for k, v in report.facts.items() if k != "quirks" and v not in (None, [], False)}
    if learned:  # what later runs start with (`crow probe --show` lists it)
        from ..wire.profile import tool_probe_words

        head = "remembered for later runs: " if remembered else "found, but not remembered: "
        print(head + shown(", ".join(f"{k} ({tool_probe_words(v)})" if k == "tool_probe" else f"{k} {json.dumps(v)}"
                                     for k, v in learned.items())), file=out)
    if report.tool_probe is not None:
        verdict = "tool calls crow can run" if report.runs_tools() else "no tool call crow can run"
    else:
        verdict = "streamed tool calling works" if report.tool_calling else "no streamed tool calling"
    print(f"{verdict} ({report.elapsed_s:.1f} s)", file=out)


def probe_schema() -> dict[str, Any]:
    """The JSON Schema of `crow probe --json` (shipped as `crow_cli/schemas/probe.schema.json`)."""
    path = Path(__file__).resolve().parent.parent / "schemas" / "probe.schema.json"
    value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return value
