"""`crow facts list [--json] | forget [--base-url URL] [--model M]`: what crow learned about servers.

Starts fast: only `wire.facts` (standard library and platformdirs) is imported, no openai. Learned
text came from servers: on a terminal it is shown on one line without control characters.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from ..text import clean_text, strip_controls
from .options import examples

__all__ = ["facts_app", "record_lines", "when"]

facts_app = typer.Typer(name="facts", help="Show and forget what crow learned about servers (per base URL and model).",
                        no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                        rich_markup_mode=None)


def _shown(text: str) -> str:
    return " ".join(strip_controls(clean_text(text)).split())


def when(seconds: float) -> str:
    """A Unix time as the local date and time, to the minute: how `crow facts list` and `crow probe --show`
    date what was learned."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def _probed(stamp: str) -> str:
    """A stored `probed_at` (`2026-12-03T08:00:00Z`, UTC) as `when` shows a time; as stored if it is no date."""
    import calendar

    try:
        return when(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return stamp


def _fact(item: str, value: Any) -> str:
    name = item.split(" ", 1)[0]
    if name == "request_rules":
        from ..wire.rules import rule_from_json

        rule = rule_from_json(value)
        return f"adapted requests: {rule.describe() if rule is not None else json.dumps(value)}"
    if name == "tool_probe" and isinstance(value, dict):  # `crow probe --tools`, point by point
        from ..wire.profile import tool_probe_words

        return f"tool_probe: {tool_probe_words(value)}"
    return f"{name}: {value if isinstance(value, str) and item != name else json.dumps(value)}"


def record_lines(record: dict[str, Any]) -> list[str]:
    """What crow remembers of one server and model (a record of `wire.facts.recall_all`), line by line for a
    terminal: each fact (each request rule, each name of a list) with, under it, when it was learned and from
    which refusal. A record written before each fact kept its own says when and why once, for the record.
    Learned text came from servers: shown on one line, without control characters."""
    from ..wire.facts import each_fact

    lines: list[str] = []
    provenance = record.get("provenance") or {}
    undated = False
    for item, value in sorted(each_fact(record).items()):
        if value in ([], {}, None):  # an empty list learned nothing
            continue
        lines.append(_shown(_fact(item, value)))
        source = provenance.get(item)
        if source is None:
            undated = True
            continue
        why = f" from the refusal: {source['why']}" if source.get("why") else ""
        lines.append("  " + _shown(f"learned {when(source['learned_at'])}{why}"))
    if isinstance(record.get("probed_at"), str):
        lines.append(_shown(f"probed: {_probed(record['probed_at'])}"))
    if undated and isinstance(record.get("learned_at"), int | float):
        why = f", from the refusal: {record['why']}" if record.get("why") else ""
        lines.append(_shown(f"last learned {when(record['learned_at'])}{why}"))
    return lines


@facts_app.command("list", epilog=examples("crow facts list", "crow facts list --json"))
def list_facts(
    json_out: Annotated[bool, typer.Option("--json", help="Print the facts as one JSON object.")] = False,
) -> None:
    """Every server and model crow remembers something for: what it learned, when, and from which refusal.

    Facts older than 30 days are not shown: they count as not known and are learned again.
    """
    from ..wire import facts

    known = facts.recall_all()
    for warning in facts.problems():
        typer.echo(_shown(warning), err=True)
    if json_out:
        print(json.dumps(known, indent=2, sort_keys=True))
        return
    if not known:
        print(f"nothing learned yet ({facts.facts_path()})")
        return
    for key, record in sorted(known.items()):
        print(_shown(key))
        for line in record_lines(record):
            print(f"  {line}")


@facts_app.command("forget", epilog=examples("crow facts forget --base-url http://127.0.0.1:8080/v1",
                                             "crow facts forget --model qwen3", "crow facts forget --all"))
def forget_facts(
    base_url: Annotated[str | None, typer.Option("--base-url", help="Only this server (credentials and query "
                                                 "ignored).", show_default=False)] = None,
    model: Annotated[str | None, typer.Option("--model", help="Only this model.", show_default=False)] = None,
    everything: Annotated[bool, typer.Option("--all", help="Everything learned, of every server.")] = False,
) -> None:
    """Forget what crow learned: of one server, one model, or (--all) everything.

    The next run sends requests as configured and learns again from what the server refuses.
    """
    from ..wire import facts

    if everything and (base_url is not None or model is not None):
        raise typer.BadParameter("--all forgets everything: give it alone, or --base-url / --model without it",
                                 param_hint="'crow facts forget'")
    for flag, value in (("--base-url", base_url), ("--model", model)):
        if value is not None and not value.strip():  # an empty filter would match nothing, or be read as none
            raise typer.BadParameter(f"{flag} is empty: name a server or model, or --all to forget everything",
                                     param_hint="'crow facts forget'")
    if base_url is None and model is None and not everything:  # a bare `forget` is a slip more often than a wish
        raise typer.BadParameter("name --base-url or --model, or --all to forget everything learned",
                                 param_hint="'crow facts forget'")

    gone = facts.forget(base_url, model)
    for key in gone:
        print(f"forgot {_shown(key)}")
    if not gone:
        print("nothing to forget")
