"""`crow probe`: what does this server stream? One line per check, or one JSON document."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..errors import CrowError
from .options import ApiKeyOpt, BaseUrlOpt, ConfigOpt, DebugOpt, LocalModelOpt, LocalOpt, ModelOpt, ProfileOpt, fail

__all__ = ["probe"]


def probe(
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document (schema: "
                                           "crow_cli/schemas/probe.schema.json).")] = False,
    record: Annotated[str | None, typer.Option("--record", metavar="DIR", help="Keep every raw request and "
                                               "response in DIR (API key and auth headers removed), for a bug "
                                               "report.")] = None,
    show: Annotated[bool, typer.Option("--show", help="Show what earlier probes and runs learned, per base URL "
                                       "and model, then the configured server's profile, each value with the "
                                       "layer it came from (built-in, config, learned), and exit.")] = False,
    tools: Annotated[bool, typer.Option("--tools", help="Ask the model for tool calls instead: one call, a call "
                                        "with an integer argument, two calls at once; each point is a native call, "
                                        "a recovered call (written as text), no call or malformed. Remembered: "
                                        "runs on a model that makes no call say so at start.")] = False,
    budget: Annotated[float, typer.Option("--budget", metavar="SECONDS", min=5.0, help="Stop probing after this "
                                          "long.")] = 50.0,
    debug: DebugOpt = False,
    local: LocalOpt = False,
    local_model: LocalModelOpt = None,
) -> None:
    """Probe a server: reachability, streaming, tool calling, and the shape of its tool-call stream.

    Exit status 0 when streamed tool calling works (with --tools: when a call crow runs came back), 1 when it
    does not (or the server cannot be reached), 2 for a usage or configuration error.
    """
    from ..wire import facts as learned

    if show:
        _show(model, base_url, config, profile, debug, json_out)
        raise typer.Exit(0)
    import asyncio

    from ..config import load_settings
    from ..probe.checks import ProbeOptions, run_probe
    from ..probe.report import render_text, use_colour
    from ..probe.tools import run_tool_probe

    try:
        settings = load_settings({"model": model, "base_url": base_url, "api_key": api_key,
                                  "local_model": local_model},
                                 config_path=config, profile=profile)
        live = not json_out and use_colour(sys.stderr)

        def progress(step: str) -> None:
            if live:
                print(f"\r\x1b[Kprobing: {step}…", end="", file=sys.stderr, flush=True)

        from ..local import local_session

        options = ProbeOptions(budget_s=budget, request_timeout_s=max(25.0, budget / 2), record_dir=record)
        try:
            with local_session(settings, enabled=local or bool(local_model)) as settings:
                report = asyncio.run((run_tool_probe if tools else run_probe)(settings, options, progress))
        finally:
            if live:
                print("\r\x1b[K", end="", file=sys.stderr, flush=True)
    except CrowError as exc:
        raise fail(exc, debug=debug) from None
    unsaved = None
    import time

    probed_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if report.tool_probe:  # --tools: what each point answered
        unsaved = learned.learn(settings.base_url, settings.model, **report.facts, probed_at=probed_at)
    elif any(c.name == "tool calling" for c in report.checks):  # the server was reached: remember what it did
        unsaved = learned.learn(settings.base_url, settings.model, **report.facts, tool_calling=report.tool_calling,
                                probed_at=probed_at)
    if unsaved is not None:
        print(f"crow: warning: what the probe found could not be remembered for later runs ({unsaved})",
              file=sys.stderr)
    if json_out:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        render_text(report, remembered=unsaved is None)
    raise typer.Exit(report.exit_code())


def _show(model: str | None, base_url: str | None, config: str | None, profile: str | None, debug: bool,
          json_out: bool) -> None:
    """`--show`: what earlier probes and runs learned, per base URL and model, then the profile of the configured
    server and model (`wire.profile`): each value, the layer it came from (built-in, config, learned) and what
    of an earlier layer it replaced. `--json`: one document, `{"learned": {KEY: facts}, "profile": {…}}`."""
    from ..config import load_settings
    from ..probe.report import shown
    from ..wire import facts as learned
    from ..wire.profile import build_profile
    from .facts import record_lines

    try:  # first: a config crow cannot read is one line, before anything is shown
        settings = load_settings({"model": model, "base_url": base_url}, config_path=config, profile=profile)
    except CrowError as exc:
        raise fail(exc, debug=debug) from None
    facts = learned.recall_all()
    for warning in learned.problems():  # each damaged entry: counted as not known, said once
        print(warning, file=sys.stderr)
    known = learned.recall(settings.base_url, settings.model) if settings.adapt_requests else {}
    server = build_profile(settings.base_url, settings.model, settings.provider, known,
                           rules=settings.adapt_requests)
    endpoint = learned.endpoint_key(settings.base_url, settings.model)
    if json_out:
        print(json.dumps({"learned": facts, "profile": {
            "endpoint": endpoint, "adapt_requests": settings.adapt_requests, "values": server.entries()}},
            indent=2, sort_keys=True))
        return
    if not facts:
        print(f"nothing probed yet ({learned.facts_path()})")
    for key, entry in sorted(facts.items()):
        print(shown(key))
        for line in record_lines(entry):  # as `crow facts list` shows them: each fact, when and why
            print(f"  {line}")
    print(f"server profile of {shown(endpoint)} "
          "(value, and the layer it came from: built-in, config or learned):")
    for key, words, came in server.described():
        print(f"  {shown(key)}: {shown(words)} ({shown(came)})")
    if not settings.adapt_requests:
        print("  (adapt_requests = false: nothing learned and no built-in request rule is used; the configured "
              "rules are)")
