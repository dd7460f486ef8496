"""The probe's battery: a fixed series of small requests to one server, each capped in tokens and time.

The series and its order are told at `_battery` (tests script the replay server by it). Requests go out with
httpx directly (public API; no SDK retries, so what the server did is what is reported) and the raw body is
kept, so that `classify` sees every byte. Each request has `max_tokens` set and its own timeout; the whole
battery stops at `budget_s`.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..config import Settings
from ..history import Message, ToolCall, as_json, assistant_message, tool_message, user_message
from ..text import mask_secrets, public_url
from ..wire.body import BodyTooLarge, capped_events, read_body
from ..wire.proxy import proxy_for
from ..wire.tls import ssl_context
from .classify import Finding, RawStream, Shape, classify, parse_sse
from .models import auth_headers, context_length, model_id
from .report import Check, CheckLevel, Report, shown

__all__ = ["TOOLS", "Exchange", "ProbeOptions", "Prober", "run_probe", "step"]

def _city_tool(name: str, description: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                       "required": ["city"]}}}


TOOLS = [_city_tool("get_weather", "Get the current weather for a city."),
         _city_tool("get_time", "Get the local time in a city."),
         _city_tool("get_population", "Get the population of a city."),
         _city_tool("get_country", "Get the country a city is in.")]
"""Offered with every tool request. Four, not one: a tiny model under crow's llama.cpp template (which shows
one example call per tool) calls a tool far more reliably with a few examples than with one."""
ONE_CALL = "Please use get_weather for Paris."
TWO_CALLS = "Please use get_weather for Paris and get_time for Tokyo, both at once."
TOOL_RESULT = "Sunny, 21 °C."


@dataclass(frozen=True)
class ProbeOptions:
    """How hard to probe.

    Attributes:
        budget_s: the whole battery stops after this many seconds (later checks are skipped).
        request_timeout_s: the longest one request may take (connect, silence and total).
        max_tokens: the cap sent with tool requests (text requests get a quarter, at least 16).
        record_dir: when set, every request and raw response is written there (secrets redacted).
    """

    budget_s: float = 50.0
    request_timeout_s: float = 25.0
    max_tokens: int = 64
    record_dir: str | None = None


@dataclass
class Exchange:
    """One request and what came back."""

    status: int | None = None
    """HTTP status; None when the request never got an answer."""
    error: str | None = None
    """Why there is no usable answer (transport error, timeout, a refusal's message)."""
    body: Any = None
    """The decoded JSON of a non-stream answer."""
    raw: str = ""
    first_token_s: float | None = None
    elapsed_s: float = 0.0
    content_type: str = ""
    stream: RawStream = field(default_factory=RawStream)
    shape: Shape | None = None

    @property
    def ok(self) -> bool:
        """A 2xx answer that streamed."""
        return self.error is None and self.status is not None and 200 <= self.status < 300

    def calls(self) -> list[ToolCall]:
        return self.shape.calls if self.shape else []


def _first_token(line: str) -> bool:
    """Whether one SSE line carries model output (content, reasoning or a tool-call delta)."""
    if not line.startswith("data:"):
        return False
    try:
        chunk = json.loads(line[5:])
    except (ValueError, RecursionError):
        return False
    for choice in (chunk.get("choices") or []) if isinstance(chunk, dict) else []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and any(delta.get(k) for k in ("content", "reasoning_content", "reasoning",
                                                                   "tool_calls")):
            return True
    return False


def _error_message(text: str) -> str:
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return shown(text)[:160] or "(empty body)"
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message") or err
    return shown(str(err))[:160]


class Prober:
    """The requests of one probe: its client, its settings and what is left of its time budget (`ProbeOptions`)."""

    def __init__(self, settings: Settings, options: ProbeOptions, client: httpx.AsyncClient) -> None:
        self.settings = settings
        self.options = options
        self.client = client
        self.base = settings.base_url.rstrip("/")
        self.started = time.monotonic()
        self.usage_option = True

    def remaining(self) -> float:
        return self.options.budget_s - (time.monotonic() - self.started)

    def timeout(self) -> float:
        return max(0.5, min(self.options.request_timeout_s, self.remaining()))

    async def get(self, url: str) -> Exchange:
        ex = Exchange()
        start = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout()):
                status, content = await self._get(url)
        except (httpx.HTTPError, TimeoutError, BodyTooLarge) as exc:
            ex.error = str(exc) if isinstance(exc, BodyTooLarge) else _transport_error(exc)
            return ex
        ex.elapsed_s = time.monotonic() - start
        ex.status = status
        ex.raw = content.decode("utf-8", "replace")
        try:
            ex.body = json.loads(content)
        except (ValueError, RecursionError):
            ex.body = None
        if status >= 400:
            ex.error = f"{status}: {_error_message(ex.raw)}"
        return ex

    async def _get(self, url: str) -> tuple[int, bytes]:
        """The status and body (decoded, capped: `wire.body`) of `GET url`."""
        async with self.client.stream("GET", url, timeout=self.timeout()) as response:
            return response.status_code, await read_body(response)

    async def chat(self, body: dict[str, Any]) -> Exchange:
        """POST one streamed request; keep the raw body and the time its first token arrived."""
        body = {"model": self.settings.model, "stream": True, "temperature": 0, **body}
        if self.usage_option:
            body["stream_options"] = {"include_usage": True}
        for attempt in (1, 2):
            ex = Exchange()
            start = time.monotonic()
            try:
                async with asyncio.timeout(self.timeout()):
                    await self._stream(body, ex, start)
            except BodyTooLarge as exc:
                ex.error = str(exc)
            except (httpx.HTTPError, TimeoutError) as exc:
                ex.error = _transport_error(exc)
                # A kept-alive connection the server closed meanwhile (llama-server after 5 s): once more.
                if attempt == 1 and ex.status is None and isinstance(exc, (httpx.RemoteProtocolError,
                                                                          httpx.ReadError, httpx.WriteError)):
                    continue
            break
        ex.elapsed_s = time.monotonic() - start
        if ex.status is not None and 200 <= ex.status < 300:
            ex.stream = parse_sse(ex.raw)
            if not ex.stream.chunks and "json" in ex.content_type:
                ex.error = "answered with one JSON document, not a stream (stream: true ignored)"
            ex.shape = classify(ex.stream)
        return ex

    async def _stream(self, body: dict[str, Any], ex: Exchange, start: float) -> None:
        async with self.client.stream("POST", f"{self.base}/chat/completions", json=body,
                                      timeout=self.timeout()) as response:
            ex.status = response.status_code
            ex.content_type = response.headers.get("content-type", "")
            if response.status_code >= 400:
                text = (await read_body(response)).decode("utf-8", "replace")
                ex.raw = text
                ex.error = f"{response.status_code}: {_error_message(text)}"
                return
            parts: list[str] = []
            pending = ""
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            async for raw in capped_events(response.aiter_bytes()):  # a gzip bomb is an error, not 1 GB
                piece = decoder.decode(raw)
                parts.append(piece)
                if ex.first_token_s is None:
                    pending += piece
                    *lines, pending = pending.replace("\r\n", "\n").split("\n")
                    if any(_first_token(line) for line in lines):
                        ex.first_token_s = time.monotonic() - start
            parts.append(decoder.decode(b"", final=True))
            ex.raw = "".join(parts)

    async def chat_usage_aware(self, body: dict[str, Any]) -> tuple[Exchange, bool]:
        """`chat`, sent again without stream_options when the server refused include_usage (crow does the same)."""
        ex = await self.chat(body)
        if self.usage_option and ex.status is not None and 400 <= ex.status < 500 and \
                "stream_options" in (ex.raw or ""):
            self.usage_option = False
            return await self.chat(body), True
        return ex, False


def _transport_error(exc: BaseException) -> str:
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return "no answer within the time limit (--budget gives a slow server more time)"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({shown(str(exc)) or 'connection refused'})"
    return f"{type(exc).__name__}: {shown(str(exc))[:160]}"


def _root(base: str) -> str:
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def run_probe(settings: Settings, options: ProbeOptions | None = None,
                    progress: Callable[[str], None] | None = None) -> Report:
    """Probe `settings.base_url` with `settings.model` and return the report (never raises for server
    behaviour: every failure becomes a check).

    Args:
        settings: connection settings (base URL, model, key, headers) as `load_settings` resolved them.
        options: budget, caps and recording.
        progress: called with the name of each step as it starts (for a status line).

    Raises:
        ConfigError: the recording folder cannot be written.
    """
    options = options or ProbeOptions()
    headers = auth_headers(settings)
    transport: httpx.AsyncBaseTransport | None = None
    if options.record_dir is not None:  # "" too: prepare_record_dir refuses it
        from ..wire.record import RecordingTransport, prepare_record_dir

        # a client given a transport reads no proxy variable: this one gets the proxy (`wire.proxy`)
        sends = httpx.AsyncHTTPTransport(verify=ssl_context(), proxy=proxy_for(settings.base_url))
        transport = RecordingTransport(prepare_record_dir(options.record_dir), sends, secrets=(settings.api_key,))
    # no redirect followed: the config's credential headers would go with it to another host
    # the proxy and the roots as crow's chat client has them (`wire.proxy`, `wire.tls`), not read again by httpx;
    # a recording transport has its proxy (a proxy given here would route around it)
    proxy = proxy_for(settings.base_url) if transport is None else None
    async with httpx.AsyncClient(headers=headers, transport=transport, timeout=options.request_timeout_s,
                                 verify=ssl_context(), proxy=proxy, trust_env=False) as client:
        prober = Prober(settings, options, client)
        report = Report(base_url=settings.base_url, model=settings.model)
        try:
            await _battery(prober, report, progress or (lambda _: None))
        finally:
            report.elapsed_s = time.monotonic() - prober.started
            secrets = (*settings.secrets, settings.api_key)  # servers echo a wrong key in their error messages
            for check in report.checks:
                check.seen, check.crow = mask_secrets(check.seen, secrets), mask_secrets(check.crow, secrets)
    return report


async def _battery(p: Prober, report: Report, progress: Callable[[str], None]) -> None:
    """Requests, in this order (tests script the replay server by it):

        GET  {base}/models                      reachable, auth, model listed, context length
        GET  {root}/props                       llama.cpp's n_ctx (404 elsewhere; not counted as a failure)
        POST chat/completions  text             time to first token, tokens/s, [DONE], comments, usage
             (again without stream_options when the server refused include_usage)
        POST  tools, one call                   tools honoured at all; the stream's shape
        POST  tools, two parallel calls         parallel_tool_calls
        POST  tool_choice "required"
        POST  tool_choice "none"
        POST  the tool result sent back         round trip accepted
             (again with reasoning_content echoed when the call turn carried reasoning)
    """
    add = report.checks.append
    facts = report.facts

    # --- reachable, auth, model listed, context window
    progress("models")
    models = await p.get(f"{p.base}/models")
    if models.status is None:
        add(Check("reachable", "fail", models.error or "no answer", "check --base-url; is the server running?"))
        return
    if 300 <= models.status < 400:
        add(Check("reachable", "fail", f"redirected the request ({models.status}); not followed (crow sends its "
                  "credentials only to the configured server)", "set --base-url to the address it should be"))
        return
    add(Check("reachable", "ok", f"{public_url(p.base)} answered in {models.elapsed_s:.2f} s"))
    if models.status in (401, 403):
        add(Check("auth", "fail", f"refused: {models.error}", "check the API key (--api-key, CROW_API_KEY, "
                  "OPENAI_API_KEY)"))
        return
    add(Check("auth", "ok", "accepted" if p.settings.api_key else "no key sent, none needed"))
    data = models.body.get("data") if isinstance(models.body, dict) else None
    entry: dict[str, Any] | None = None
    if isinstance(data, list):
        ids = [name for m in data if (name := model_id(m)) is not None]
        entry = next((m for m in data if isinstance(m, dict) and m.get("id") == p.settings.model), None)
        if entry is not None:
            add(Check("model listed", "ok", f"{p.settings.model} is among {len(ids)} model(s)"))
        else:
            listed = ", ".join(ids[:5]) + (" …" if len(ids) > 5 else "")
            add(Check("model listed", "warn", f"{p.settings.model} is not listed ({listed or 'none'})",
                      "sends it anyway; some servers serve one model whatever the name"))
    else:
        add(Check("model listed", "warn", f"/models gave no model list ({models.error or 'unexpected body'})",
                  "sends the model name as given"))
    props = await p.get(f"{_root(p.base)}/props")
    n_ctx, where = context_length(entry, props.body if props.ok else None)
    if n_ctx:
        facts["context_window"] = n_ctx
        add(Check("context window", "ok", f"{n_ctx} tokens ({where})"))
    else:
        add(Check("context window", "skip", "the server does not say (/props, /models)"))

    # --- text streaming
    progress("text streaming")
    small = max(16, p.options.max_tokens // 4)
    text, refused = await p.chat_usage_aware({"messages": [{"role": "user", "content": "Say hello in five words."}],
                                              "max_tokens": small})
    facts["usage_option_refused"] = refused
    if not text.ok or text.shape is None:
        add(Check("text streaming", "fail", text.error or "no stream", "reports the error"))
    else:
        tokens = (text.shape.usage or {}).get("completion_tokens")
        pieces = sum(1 for c in text.stream.chunks for ch in c.get("choices") or [] if isinstance(ch, dict)
                     and isinstance(ch.get("delta"), dict) and ch["delta"].get("content"))
        count = tokens if isinstance(tokens, int) and tokens > 0 else pieces
        first = text.first_token_s
        span = text.elapsed_s - (first or 0.0)
        rate = f", ~{count / span:.0f} tokens/s" if first is not None and span > 0.01 and count > 1 else ""
        first_text = f"first token after {first:.2f} s" if first is not None else "no token streamed"
        add(Check("text streaming", "ok" if first is not None else "warn", f"{first_text}{rate}"))
        add(Check("[DONE]", "ok" if text.stream.done else "warn", "sent" if text.stream.done else "not sent",
                  "" if text.stream.done else "ends the turn when the body ends"))
        comments = text.stream.comments
        add(Check("SSE comments", "ok", f"{len(comments)} keep-alive comment(s)" if comments else "none",
                  "skips them" if comments else ""))
        usage_seen = text.shape.usage is not None
        if refused:
            add(Check("usage", "warn", "stream_options.include_usage refused (4xx)", "drops the option and sends "
                      "the request again; no token counts"))
        else:
            add(Check("usage", "ok" if usage_seen else "warn",
                      "usage chunk with stream_options.include_usage" if usage_seen else "no usage chunk",
                      "" if usage_seen else "shows no token counts"))

    # --- tool calling
    shapes: list[Shape] = []
    progress("tool calling")
    tools_body = {"tools": TOOLS, "max_tokens": p.options.max_tokens}
    one = await step(p, report, "tool calling", {**tools_body, "messages": [{"role": "user", "content": ONE_CALL}]})
    if one is not None and one.ok and one.shape is not None:
        shapes.append(one.shape)
        if one.calls():
            report.tool_calling = True
            call = one.calls()[0]
            add(Check("tool calling", "ok", f"a streamed call: {call.name}({_short(call.arguments)})"))
        else:
            said = _short(one.shape.content or "", 60)
            add(Check("tool calling", "fail", f"tools ignored: answered in text ({said!r})" if said else
                      "tools ignored: no call and no text", "cannot run tools with this server and model; a "
                      "llama.cpp server needs --jinja and a tool-capable chat template"))
    elif one is not None:
        add(Check("tool calling", "fail", f"the request with tools: {_failed(one)}", "cannot run tools"))

    progress("parallel calls")
    two = await step(p, report, "parallel calls", {
        "tools": TOOLS, "parallel_tool_calls": True, "max_tokens": p.options.max_tokens,
        "messages": [{"role": "user", "content": TWO_CALLS}]})
    if two is not None:
        if two.ok and two.shape is not None:
            shapes.append(two.shape)
            n = len(two.calls())
            report.tool_calling = report.tool_calling or n > 0
            add(Check("parallel calls", "ok" if n >= 2 else "warn", f"{n} call(s) in one turn",
                      "runs them concurrently, results in call order" if n >= 2 else
                      "runs one call per turn; the model may ask for the next one after"))
        else:
            add(Check("parallel calls", "warn", _failed(two), "never sends parallel_tool_calls"))

    progress("tool_choice")
    required = await step(p, report, "tool_choice required", {
        **tools_body, "tool_choice": "required", "messages": [{"role": "user", "content": "Hello!"}]})
    if required is not None:
        if required.ok and required.shape is not None:
            shapes.append(required.shape)
            got = bool(required.calls())
            report.tool_calling = report.tool_calling or got
            add(Check("tool_choice required", "ok" if got else "warn",
                      "honoured: a call" if got else "not honoured: answered in text", "does not send "
                      "tool_choice"))
        else:
            add(Check("tool_choice required", "warn", _failed(required), "does not send tool_choice"))
    none = await step(p, report, "tool_choice none", {
        **tools_body, "tool_choice": "none", "messages": [{"role": "user", "content": ONE_CALL}]})
    if none is not None:
        if none.ok and none.shape is not None:
            add(Check("tool_choice none", "ok" if not none.calls() else "warn",
                      "honoured: answered in text" if not none.calls() else "not honoured: a call came anyway",
                      "does not send tool_choice"))
        else:
            add(Check("tool_choice none", "warn", _failed(none), "does not send tool_choice"))

    # --- the stream's shape
    seen: dict[str, Finding] = {}
    for shape in shapes:
        for finding in shape.findings:
            seen.setdefault(finding.code, finding)
    report.shape = list(seen.values())
    facts["quirks"] = [f.code for f in report.shape if f.level != "ok"]
    if report.shape:
        worst: CheckLevel = "fail" if any(f.level == "fail" for f in report.shape) else \
            "warn" if any(f.level == "warn" for f in report.shape) else "ok"
        traits = [f.label for f in report.shape if f.code not in _PLAIN]
        add(Check("stream shape", worst, "; ".join(traits) if traits else "as OpenAI streams it",
                  "handles each, below" if traits else ""))

    # --- round trip
    progress("round trip")
    source = one if one is not None and one.calls() else two if two is not None and two.calls() else None
    calls = source.calls() if source is not None else []
    if not calls:
        add(Check("round trip", "skip", "no tool call to answer"))
        return
    assert source is not None and source.shape is not None
    assistant = assistant_message(None, calls)
    history: list[Message] = [user_message(ONE_CALL), assistant, *(tool_message(c.id, TOOL_RESULT) for c in calls)]
    back = await step(p, report, "round trip", {"tools": TOOLS, "messages": history,
                                                 "max_tokens": p.options.max_tokens})
    if back is None:
        return
    reasoning = source.shape.reasoning
    if back.ok:
        answer = _short((back.shape.content if back.shape else None) or "", 60)
        add(Check("round trip", "ok", f"tool result accepted; answered {answer!r}" if answer else
                  "tool result accepted (no text in the answer)"))
    elif reasoning and "reasoning" in (back.raw or "").lower():
        echoed = {**as_json(assistant), "reasoning_content": reasoning}
        again = await step(p, report, "reasoning echo", {"tools": TOOLS, "max_tokens": 32,
                                                          "messages": [history[0], echoed, *history[2:]]})
        ok = again is not None and again.ok
        facts["reasoning_echo"] = "needed" if ok else None
        if ok:  # what the client's refusal handling would learn (`wire.outgoing`): later runs start with it
            facts["required_fields"] = ["reasoning_content"]
        add(Check("round trip", "fail", f"refused without reasoning_content: {back.error}",
                  "accepted once reasoning_content was echoed; crow sends it back on every assistant message "
                  "(remembered)" if ok else "refused with reasoning_content echoed as well"))
        return
    else:
        add(Check("round trip", "fail", f"the tool result: {_failed(back)}", "the run stops with this error"))
        return
    if reasoning:
        progress("reasoning echo")
        echoed = {**as_json(assistant), "reasoning_content": reasoning}
        again = await step(p, report, "reasoning echo", {"tools": TOOLS, "max_tokens": 32,
                                                          "messages": [history[0], echoed, *history[2:]]})
        if again is not None:
            facts["reasoning_echo"] = "accepted" if again.ok else "refused"
            if not again.ok:  # later runs never send it (`wire.outgoing`)
                facts["refused_fields"] = ["reasoning_content"]
            add(Check("reasoning echo", "ok" if again.ok else "warn",
                      "reasoning_content in the history accepted" if again.ok else
                      f"reasoning_content in the history refused: {again.error}",
                      "sends reasoning back beside tool calls" if again.ok else
                      "never sends reasoning_content to this server (remembered)"))


_PLAIN = {"arguments-whole", "arguments-fragmented", "finish-tool-calls", "finish-stop"}
"""Findings that every well-behaved stream has: not named in the `stream shape` summary."""


async def step(p: Prober, report: Report, name: str, body: dict[str, Any]) -> Exchange | None:
    """One chat request, or None (with a `skip` check) when the time budget is spent."""
    if p.remaining() <= 1.0:
        report.checks.append(Check(name, "skip", f"time budget of {p.options.budget_s:.0f} s spent"))
        return None
    return await p.chat(body)


def _failed(ex: Exchange) -> str:
    """`refused (400: …)` for an error status, else what went wrong (no answer in time, cannot connect …)."""
    return f"refused ({ex.error})" if ex.status is not None and ex.status >= 400 else ex.error or "failed"


def _short(text: str, limit: int = 80) -> str:
    text = shown(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"

