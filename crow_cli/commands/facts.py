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

__all__ = ["facts_app"]

facts_app = typer.Typer(name="facts", help="Show and forget what crow learned about servers (per base URL and model).",
                        no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                        rich_markup_mode=None)


def _shown(text: str) -> str:
    return " ".join(strip_controls(clean_text(text)).split())


def _line(name: str, value: Any) -> str:
    if name == "request_rules":
        from ..wire.adapt import rules_from_json

        return f"adapted requests: {'; '.join(r.describe() for r in rules_from_json(value)) or 'none'}"
    if name == "learned_at" and isinstance(value, int | float):
        return f"learned: {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(value))}"
    if name == "why":
        return f"from the refusal: {value}"
    return f"{name}: {json.dumps(value)}"


@facts_app.command("list", epilog=examples("crow facts list", "crow facts list --json"))
def list_facts(
    json_out: Annotated[bool, typer.Option("--json", help="Print the facts as one JSON object.")] = False,
) -> None:
    """Every server and model crow remembers something for: what it learned, when, and from which refusal.

    Facts older than 30 days are not shown: they count as not known and are learned again.
    """
    from ..wire import facts

    known = facts.recall_all()
    if facts.problem():
        typer.echo(_shown(facts.problem() or ""), err=True)
    if json_out:
        print(json.dumps(known, indent=2, sort_keys=True))
        return
    if not known:
        print(f"nothing learned yet ({facts.facts_path()})")
        return
    for key, record in sorted(known.items()):
        print(_shown(key))
        for name, value in sorted(record.items()):
            if value not in ([], {}, None):
                print(f"  {_shown(_line(name, value))}")


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
