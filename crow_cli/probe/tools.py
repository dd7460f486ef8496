"""`crow probe --tools`: can this model call tools crow can run? Three small requests, one outcome each.

Requests, in this order (tests script the replay server by it), each offering the same five tools:

    POST  one call         "use get_weather for Paris"
    POST  typed argument   "use get_forecast for Paris, 3 days ahead" (`days` is an integer)
    POST  two calls        "get_weather for Paris and get_time for Tokyo, both at once"

Each point's outcome (`wire.profile.TOOL_OUTCOMES`, told at `outcome_of`) and the text format of recovered
calls are what `crow probe` stores for later runs (`wire.facts`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from ..config import Settings
from ..errors import ToolError
from ..history import ToolCall
from ..text import mask_secrets
from ..tools.arguments import check_arguments
from ..wire.profile import TOOL_OUTCOMES, TOOL_POINTS
from ..wire.proxy import proxy_for
from ..wire.textcalls import recover_calls
from ..wire.tls import ssl_context
from .checks import TOOLS, Exchange, ProbeOptions, Prober, step
from .models import auth_headers
from .report import Check, CheckLevel, Report, shown

__all__ = ["PROMPTS", "TOOL_TOOLS", "outcome_of", "run_tool_probe"]

TOOL_TOOLS: list[dict[str, Any]] = [*TOOLS, {"type": "function", "function": {
    "name": "get_forecast", "description": "Get the weather forecast for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "Days ahead"}},
        "required": ["city", "days"]}}}]
"""Offered with each point: the battery's four city tools and one that needs an integer."""
PROMPTS: dict[str, str] = {
    "one": "Please use get_weather for Paris.",
    "typed": "Please use get_forecast for Paris, 3 days ahead.",
    "two": "Please use get_weather for Paris and get_time for Tokyo, both at once.",
}
"""What each point (`wire.profile.TOOL_POINTS`) asks."""
_WANTED = {"one": 1, "typed": 1, "two": 2}
"""Calls each point asks for."""
_MAX_TOKENS = 128
"""The cap of each request, at least: two calls of JSON fit in it."""
_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOL_TOOLS}


def _invalid(name: str, arguments: str) -> str | None:
    """Why a call would not run (its name offers no tool, its arguments fail the schema), or None: it runs."""
    if name not in _SCHEMAS:
        return f"{name or '(no name)'} is no offered tool"
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return f"{name}'s arguments are not JSON"
    try:
        check_arguments(_SCHEMAS[name], parsed, name)
    except ToolError as exc:
        return str(exc)
    return None


def outcome_of(key: str, ex: Exchange) -> tuple[str, Check, str | None]:
    """The outcome code of point `key` from its answered exchange, its report line and the text format of
    recovered calls (None when none were recovered).

    One of: a native call (streamed as a tool call, its arguments valid against the tool's schema), a recovered
    call (written as text in a format crow reads, `wire.textcalls`, and valid), no call, or malformed (a call
    naming no offered tool, or whose arguments are not a JSON object or fail the schema as `tools.arguments`
    checks it, the coercions a run makes included). A request the server refuses or never answers, or answers
    with an error in the stream or with no decodable chunk (an HTML page, garbage), has no outcome: its line
    says why.
    """
    name = TOOL_POINTS[key]
    native: list[ToolCall] = ex.calls()
    calls = [(c.name, c.arguments, c.cut_off) for c in native]
    fmt = None
    if not calls and ex.shape is not None:
        found = recover_calls(ex.shape.content, list(_SCHEMAS),
                              tags_dropped="template-tags-in-content" in ex.shape.rules)
        if found is not None:
            fmt = found.format
            calls = [(n, a, False) for n, a in found.calls]
    if not calls:
        said = _short(ex.shape.content or "" if ex.shape else "", 60)
        return "none", Check(name, "fail", f"{TOOL_OUTCOMES['none']}: answered in text ({said!r})" if said else
                             f"{TOOL_OUTCOMES['none']}: no call and no text",
                             "tools cannot run with this model and server"), fmt
    shown_calls = ", ".join(f"{n}({_short(a, 60)})" for n, a, _ in calls)
    problems = [why for n, a, cut in calls if (why := "arguments cut off" if cut else _invalid(n, a))]
    if problems:
        return "malformed", Check(name, "warn", f"{TOOL_OUTCOMES['malformed']}: {shown_calls}: {problems[0]}",
                                  "answers the call with what is wrong, so the model can try again"), fmt
    code = "native" if native else "recovered"
    wanted = _WANTED[key]
    level: CheckLevel = "ok" if native and len(calls) >= wanted else "warn"
    count = f" ({len(calls)} of {wanted} calls)" if len(calls) < wanted else ""
    crow = f"reads calls written as text ({fmt} format) and runs them" if fmt else \
        "runs one call per turn; the model may ask for the next one after" if count else ""
    return code, Check(name, level, f"{TOOL_OUTCOMES[code]}: {shown_calls}{count}", crow), fmt


def _short(text: str, limit: int) -> str:
    text = shown(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def run_tool_probe(settings: Settings, options: ProbeOptions | None = None,
                         progress: Callable[[str], None] | None = None) -> Report:
    """Ask `settings.model` at `settings.base_url` for tool calls at each point and return the report: a check
    per point (named by `TOOL_POINTS`), `Report.tool_probe` the outcome of each point answered, and in
    `Report.facts` what later runs start with (`tool_probe`, and `text_call_format` when calls were recovered).
    Never raises for server behaviour: a request refused or not answered is a failed check with no outcome.

    Raises:
        ConfigError: the recording folder cannot be written.
    """
    options = options or ProbeOptions()
    transport: httpx.AsyncBaseTransport | None = None
    if options.record_dir is not None:
        from ..wire.record import RecordingTransport, prepare_record_dir

        sends = httpx.AsyncHTTPTransport(verify=ssl_context(), proxy=proxy_for(settings.base_url))
        transport = RecordingTransport(prepare_record_dir(options.record_dir), sends, secrets=(settings.api_key,))
    proxy = proxy_for(settings.base_url) if transport is None else None
    report = Report(base_url=settings.base_url, model=settings.model, tool_probe={})
    async with httpx.AsyncClient(headers=auth_headers(settings), transport=transport,
                                 timeout=options.request_timeout_s, verify=ssl_context(), proxy=proxy,
                                 trust_env=False) as client:
        prober = Prober(settings, options, client)
        try:
            await _points(prober, report, progress or (lambda _: None))
        finally:
            report.elapsed_s = time.monotonic() - prober.started
            secrets = (*settings.secrets, settings.api_key)
            for check in report.checks:
                check.seen, check.crow = mask_secrets(check.seen, secrets), mask_secrets(check.crow, secrets)
    return report


async def _points(p: Prober, report: Report, progress: Callable[[str], None]) -> None:
    outcomes = report.tool_probe if report.tool_probe is not None else {}
    formats: list[str] = []
    for key, name in TOOL_POINTS.items():
        progress(name)
        body: dict[str, Any] = {"tools": TOOL_TOOLS, "max_tokens": max(_MAX_TOKENS, p.options.max_tokens),
                                "messages": [{"role": "user", "content": PROMPTS[key]}]}
        if _WANTED[key] > 1:
            body["parallel_tool_calls"] = True
        ex = await step(p, report, name, body)
        if ex is None:
            continue
        if ex.ok and ex.shape is not None and (ex.shape.error is not None or not ex.stream.chunks):
            # says nothing of the model: an outcome would be stored and every later run warned of "no call"
            ex.error = f"error in the stream ({_short(ex.shape.error, 120)})" if ex.shape.error is not None else \
                f"no stream of chunks came back ({_short(ex.raw, 60) or 'an empty body'!r})"
        if not ex.ok or ex.shape is None:
            failed = f"refused ({ex.error})" if ex.status is not None and ex.status >= 400 else ex.error or "failed"
            report.checks.append(Check(name, "fail", f"the request: {failed}", "no outcome for this point"))
            if ex.status is None:  # no answer at all: the next points would not get one either
                for rest in list(TOOL_POINTS)[list(TOOL_POINTS).index(key) + 1:]:
                    report.checks.append(Check(TOOL_POINTS[rest], "skip", "the server did not answer"))
                return
            continue
        code, check, fmt = outcome_of(key, ex)
        outcomes[key] = code
        report.checks.append(check)
        report.tool_calling = report.tool_calling or bool(ex.calls())
        if fmt is not None:
            formats.append(fmt)
    if outcomes:
        report.facts["tool_probe"] = dict(outcomes)
    if formats:
        report.facts["text_call_format"] = formats[-1]
