"""The streaming Chat Completions client: history in, raw chunk dicts (and notices) out.

Built on the openai SDK's public surface (imported lazily: it costs ~0.7 s): the client's `post()`
(the SDK's documented way to call an endpoint without its resource classes) sends the body exactly as
crow built it (JSON-ready dicts: no SDK transform walks the history, no `openai.resources` module is
imported) and hands back the raw `httpx.Response`, whose bytes `wire.stream` decodes with `httpx-sse`
into raw dicts, so provider quirks reach the accumulator untouched. The SDK still gives auth (and the
no-key provider), the base URL and its default query, headers, timeouts, the transport and its error
classes. The SDK's own retries are off (`max_retries=0`): crow's loop here retries
408/409/429/5xx and connection errors before a stream starts (`wire.retries` has the policy) and yields
each retry as a `Notice(code="retrying")` before its wait. Every SDK/httpx error is mapped here, once,
to a `ProviderError` subclass.

Per request, the client also adapts to what the server accepts. A 400/422 refusal is read once
(`ChatClient._adapt`, through `wire.adapt.change_for`) into one `adapt.Change` of rule classes: message-field
rules (`DropField`, `RequireField`, `ToolMessageName`, `MapToolCallIds`) shape the outgoing copy of the history
(`wire.outgoing`: what the server attached goes back as `reasoning_echo` decides), the others (a tool-schema
keyword, a tool name, a parameter such as `stream_options`, a message shape) the request body. Each change
applies to the outgoing request only (the history keeps what really happened); the request is sent once more
with everything else unchanged, a `Notice` names the rule classes and the server's reason, and a refusal that
teaches nothing new ends the turn with the server's message. A change that fits one prompt only (`max_tokens`
lowered to the room that prompt leaves in the context window: `adapt.Change.once`) holds for that request and
is never remembered; a value the user configured that the server refuses for its value ends the run with one
line. What is learned is remembered per base URL + model (`wire.facts`) and applied before the first request
of later runs: the client starts from one `wire.profile.ServerProfile`, built once from the built-in,
configured and learned layers; `adapt_requests=False` turns that mechanism off (a refused `stream_options` is
then still dropped, by a `DropParam` rule for the client's life, never remembered).

Imports: the SDK and the sibling modules that import httpx (`body`, `record`, `stream`, `tls`) are imported where
they are used, so that a surface can import this module, start its MCP servers and read its session while
`import_in_background` loads them off the main thread; everything else is imported at the top.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import startup
from ..errors import AuthError, ContextOverflow, ProviderError, QuotaExceeded, RateLimited, ServerError, StreamCut
from ..events import Notice, WarningEvent
from ..history import Message
from ..text import header_secrets, mask_secrets, public_url, short_text, url_secrets
from .accumulate import stream_error
from .change import Change, change_for
from .facts import facts_path, learn, problems, recall
from .outgoing import REASONING_ECHO, Outgoing, ReasoningEcho
from .profile import build_profile
from .proxy import proxy_for, through
from .refusal import reason as refusal_reason
from .refusal import value_refused
from .responses import ChunkTranslator, wire_hint
from .responses import request_body as responses_body
from .retries import MAX_RETRY_AFTER_S, retry_after_s, retry_notice, retry_wait_s, should_retry
from .rules import DropParam, FieldRule, RenameTools, Rule, SetParam, apply_rules, tool_names
from .slots import server_slots
from .vision import ImagesRefused, holds_images, known_text_only, refuses_images
from .wording import CONTEXT_OVERFLOW, OVERFLOW_NUMBERS, OVERFLOW_PROMPT, OVERFLOW_WINDOW

if TYPE_CHECKING:
    from .stream import AfterDone

__all__ = ["ChatClient", "ClientSettings", "ReasoningEcho", "context_overflow", "import_in_background", "map_error",
           "split_base_url"]


@dataclass(frozen=True)
class ClientSettings:
    """Where and how to reach the model."""

    base_url: str
    """May carry a query string (`?api-version=…`, Azure): it is sent with every request, never shown."""
    model: str
    api_key: str | None = field(default=None, repr=False)
    """Secret: never printed, logged or stored; `repr` hides it."""
    headers: dict[str, str] = field(default_factory=dict)
    max_retries: int = 3
    """Retries for 408/409/429/5xx and connection errors before any output."""
    connect_timeout_s: float = 15.0
    idle_timeout_s: float = 300.0
    """Longest silence (seconds) between two reads of a response before the turn fails."""
    first_byte_timeout_s: float = 60.0
    """Longest wait (seconds) from sending a request to the start of its response (status and headers);
    past it the turn fails at once, without retries (a server that accepted the connection and hangs)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Extra request fields (temperature, max_tokens …) merged into every request body."""
    record_dir: str | None = None
    """When set, every request body and raw SSE response is written there (see `wire.record`)."""
    reasoning_echo: ReasoningEcho = "auto"
    """Whether a turn's reasoning goes back to the server (a `ReasoningEcho`: `auto`, `always` or `never`);
    see `ChatClient.outgoing_messages`. Another value is a `ValueError` when the client is made."""
    adapt_requests: bool = True
    """Change what a server refuses and send the request again, remembering the change (`wire.adapt`);
    False: a refusal ends the turn, and no learned or known rule is applied."""
    trace: bool = False
    """Report each adaptation decision as a `Notice(code="adapt_debug")` (for `--debug`)."""
    provider: dict[str, Any] = field(default_factory=dict)
    """Overrides of the server's `wire.profiles.Profile` (the config's `[provider]` table)."""
    params_from: str | None = None
    """Where `params` were set, as a refused value's error names it (`[profiles.fast.params] in FILE`); None:
    not known (the error then points at the config and the flags)."""


def split_base_url(base_url: str) -> tuple[str, dict[str, str | list[str]]]:
    """`base_url` without its query string, and the query's parameters (a repeated name gives a list).

    The SDK joins paths onto the base URL's text, so a query must travel as parameters instead.
    """
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    parts = urlsplit(base_url)
    query: dict[str, str | list[str]] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        old = query.get(name)
        query[name] = value if old is None else [*([old] if isinstance(old, str) else old), value]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), query


class ChatClient:
    """Streams turns from an OpenAI-compatible `/chat/completions` endpoint (`stream: true`).

    Args:
        settings: connection settings; `api_key` may be None for servers that need none.
    """

    def __init__(self, settings: ClientSettings) -> None:
        if settings.reasoning_echo not in REASONING_ECHO:  # typed, but a caller may pass any text
            raise ValueError(f"reasoning_echo must be auto, always or never, not {settings.reasoning_echo!r}")
        self.settings = settings
        self._sdk: Any = None
        self._after_done: AfterDone | None = None  # learned: a server keeps its bodies open after [DONE]
        self._url, self._query = split_base_url(settings.base_url)
        self._proxy = proxy_for(self._url)  # read once, now: a proxy crow cannot use is one line before the run
        self._shown_url = public_url(settings.base_url)
        # redacted from errors and records: the key, those in the URL, credential header values
        self._secrets = [settings.api_key, *url_secrets(settings.base_url), *header_secrets(settings.headers)]
        self._rules: list[Rule] = []  # what the server refuses, changed in every request (`wire.adapt`)
        self._once: list[Rule] = []  # changed in the request being sent only (the room its prompt leaves)
        # a value the user configured, set to the one the server names: for this run only, never stored (a
        # later run with another value asks the server again)
        self._run_only: list[Rule] = []
        self._known = 0  # how many of `_rules` were known in advance or recalled (not to be stored again)
        self._unsaved = False  # a rule learned in this run, stored once a request with it is accepted
        self._why = ""  # the last refusal that changed this client: stored as the facts' `why`
        self._unremembered = False  # the facts store could not be written: said once
        self._traced = False
        self._fields_traced = False
        self._offered_tools: list[dict[str, Any]] = []

        known = recall(settings.base_url, settings.model) if settings.adapt_requests else {}
        self.profile = build_profile(settings.base_url, settings.model, settings.provider, known,
                                     rules=settings.adapt_requests)
        """What is known of this server (`wire.profile`): built-in knowledge, the config's `[provider]` table, then
        what earlier runs learned (none, and no request rule, when `adapt_requests` is off)."""

        self.takes_images = not known_text_only(settings.model, known)
        """Whether the model may be sent images: False once known text-only (`wire.vision`): by its name, or
        learned from a refusal of image parts (then requests holding images fail before they are sent)."""

        self._facts_problems = problems() if settings.adapt_requests else []  # said once, before the first request
        # what goes back of what servers attached to messages, and the fields this one refused or demanded
        self._outgoing = Outgoing(settings.reasoning_echo, reasoning_fields=self.profile.reasoning_fields,
                                  known=self.profile.message_facts(), author=self.author)
        # message-field rules among the request rules (built-in or configured: learned ones are stored as the
        # message facts above) are the message policy's (`wire.outgoing`), applied and never stored as learned
        if fields := [r for r in self.profile.request_rules if isinstance(r, FieldRule)]:
            self._outgoing.add(fields, learned=False)
        self._rules = [r for r in self.profile.request_rules if not isinstance(r, FieldRule)]
        self._known = len(self._rules)

    def _client(self) -> Any:
        if self._sdk is None:
            import httpx
            from openai import DEFAULT_CONNECTION_LIMITS, AsyncOpenAI

            from .body import CappedErrorBodies
            from .tls import ssl_context

            s = self.settings
            timeout = httpx.Timeout(connect=s.connect_timeout_s, read=s.idle_timeout_s, write=60.0, pool=30.0)
            # the SDK reads a refusal's body whole: this transport reads it first, capped (`wire.body`); a
            # client given a transport reads no proxy variable, so the transport gets the proxy (`wire.proxy`)
            transport = CappedErrorBodies(httpx.AsyncHTTPTransport(
                verify=ssl_context(), proxy=self._proxy, limits=DEFAULT_CONNECTION_LIMITS))
            if s.record_dir:
                from .record import recording_http_client

                http_client = recording_http_client(s.record_dir, timeout=timeout, secrets=self._secrets,
                                                    inner=transport)
            else:  # as the SDK's default client (`openai.DefaultAsyncHttpxClient`), on that transport
                http_client = httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=True)
            headers = dict(s.headers)
            if s.api_key:  # --api-key and the env beat an Authorization header from the config file
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            self._sdk = AsyncOpenAI(
                base_url=self._url,
                api_key=s.api_key or _no_key,  # a key provider: no key is no error, and no header (`_send`)
                default_headers=headers or None,
                default_query=self._query or None,
                max_retries=0,  # crow retries itself, to report each retry (`wire.retries`)
                timeout=timeout,
                http_client=http_client,
            )
            startup.loaded()  # the SDK is in: collect again, skipping what start-up made
        return self._sdk

    @property
    def author(self) -> dict[str, str]:
        """Who writes this client's turns, as recorded on each assistant message (`history.AUTHOR_KEY`):
        the public base URL (no credentials, no query) and the model."""
        return {"base_url": self._shown_url.rstrip("/"), "model": self.settings.model}

    @property
    def choices(self) -> int:
        """The number of choices each request asks for (`n` in the params; 1 when unset or not a number)."""
        n = self.settings.params.get("n")
        return n if type(n) is int and n > 0 else 1

    @property
    def recover_tool_calls(self) -> bool:
        """Whether tool calls a turn's text ends with are run as calls (the profile's `recover_tool_calls`)."""
        return self.profile.recover_tool_calls

    @property
    def reasoning_fields(self) -> tuple[str, ...]:
        """The delta fields this server's reasoning text comes in (for the accumulator)."""
        return self.profile.reasoning_fields

    def outgoing_messages(self, messages: list[Message]) -> list[dict[str, Any]]:
        """`messages` as they are sent (`wire.outgoing`): what the server attached to each assistant
        message goes back under its own name; reasoning as `reasoning_echo` says (`auto`: every assistant
        message of an exchange that used tools); fields the server refused are dropped and reasoning
        fields it demanded are added. Copies where changed; the history is never changed."""
        return self._outgoing.messages(messages)

    def request_body(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        """The JSON body of one streamed turn (OpenAI Chat Completions `create` with `stream: true`)."""
        body: dict[str, Any] = {**self.settings.params, "model": self.settings.model,
                                "messages": self.outgoing_messages(messages), "stream": True}
        if tools:
            body["tools"] = tools
        self._offered_tools = tools or []
        body["stream_options"] = {"include_usage": True}  # dropped by a rule where the server refuses it
        if self._rules or self._once or self._run_only:
            body = apply_rules(body, [*self._rules, *self._run_only, *self._once])
        return body

    async def stream(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> AsyncGenerator[dict[str, Any] | Notice | WarningEvent, None]:
        """`_stream` within one of the server's request slots (`wire.slots`: `[provider] max_concurrent_requests`),
        shared by every client of the run on that server; a request that must wait for one is announced first
        with a `Notice(code="queued")`. Raises what `_stream` raises."""
        limit = self.settings.provider.get("max_concurrent_requests")
        slots = server_slots(self.settings.base_url, limit if isinstance(limit, int) else None)
        if slots is not None and slots.locked():
            yield Notice(f"crow: waiting for a free request slot at {self._shown_url} (max_concurrent_requests = "
                         f"{limit})", "queued")
        async with slots if slots is not None else contextlib.nullcontext(), \
                aclosing(self._stream(messages, tools)) as items:
            async for item in items:
                yield item

    async def _stream(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> AsyncGenerator[dict[str, Any] | Notice | WarningEvent, None]:
        """Yield each chunk of one turn as the decoded JSON of its SSE `data:` line.

        Before the first chunk: each retry (429, 5xx, a connection error) as a `Notice(code="retrying")`,
        before its wait; a request sent again with its reasoning fields dropped or added as a
        `Notice(code="reasoning_echo")`. Among the chunks: a `WarningEvent` for a damaged event that was
        skipped (its complete frames recovered). The loop passes both kinds on as they are.

        Raises:
            AuthError: 401/403, or no API key for a hosted API that needs one.
            RateLimited: 429 after retries.
            ContextOverflow: the history is longer than the model's context window.
            ServerError: 5xx after retries, an error object inside the stream, a body that is no stream.
            StreamCut: the connection broke or went idle after the stream started.
            ProviderError: any other refusal (400, 404 …), an unreachable server, or no response within
                `first_byte_timeout_s`.
        """
        if not self.settings.api_key and self.profile.needs_key:  # it would only answer 401
            raise AuthError(f"no API key for {self._shown_url}: set OPENAI_API_KEY or CROW_API_KEY (or "
                            "--api-key), or point --base-url at a server that needs none, or try a small local "
                            "model with --local")
        from .stream import AfterDone, iter_chunks

        if self._after_done is None:
            self._after_done = AfterDone()

        # an image in the messages is one the person attached (the loop gives tools' images as their names to a
        # model known text-only): it is sent whatever is known, and the server's answer is the news
        for warning in self._facts_problems:
            yield Notice(warning, "facts_damaged")
        self._facts_problems = []
        if self.settings.trace and not self._fields_traced:
            self._fields_traced = True
            yield Notice(f"crow: debug: server profile {self.profile.name!r}; messages go as "
                         f"{self._outgoing.describe()}", "adapt_debug")
            yield Notice("crow: debug: server profile values (and the layer each came from): " + "; ".join(
                f"{key} {value} ({layer})" for key, value, layer in self.profile.described()), "adapt_debug")
        if self.settings.trace and self._rules and not self._traced:
            self._traced = True

            yield Notice(f"crow: debug: adapting every request to this server as known or learned before: "
                         f"{Change(tuple(self._rules), '').describe()}", "adapt_debug")
        try:
            async with AsyncExitStack() as stack:
                retries, adapted = 0, set[str]()
                self._once = []
                responses = self.profile.wire_api == "responses"
                while True:
                    body = self.request_body(messages, tools)
                    try:
                        if responses:  # the same body, converted at the edge (`wire.responses`)
                            response = await self._send(stack, responses_body(body, messages, self.author),
                                                        "/responses")
                        else:
                            response = await self._send(stack, body)
                        if not self.takes_images and holds_images(body["messages"]):
                            self._images_taken()  # what was known is stale: the model takes images now
                        break
                    except Exception as exc:
                        if (refused := self._images_refused(exc, body)) is not None:
                            raise refused from exc  # final: no change to the request makes the model see
                        # a refusal is read against the Chat Completions body: not on the Responses wire
                        if not responses and (notices := self._adapt(exc, body, adapted)) is not None:
                            for notice in notices:
                                yield notice
                            continue
                        wait, retry = self._retry(exc, retries)
                        if retry is None:
                            if (final := self._final_refusal(exc)) is not None:
                                yield final
                            raise
                        yield retry
                        retries += 1
                        await asyncio.sleep(wait)
                if self._unsaved:  # the server took the changed request: remember the change
                    if (unsaved := self._remember()) is not None:
                        yield unsaved
                    if self.settings.trace:

                        yield Notice(f"crow: debug: remembered for {self._shown_url} {self.settings.model} in "
                                     f"{facts_path()}: {_json(self._learned_now())}", "adapt_debug")
                back = self._names_back(body)
                items = iter_chunks(response.aiter_bytes(), response.headers.get("content-type", ""),
                                    self._after_done)
                if responses:  # its events as chunks (`wire.responses`); the chat path pays nothing for it
                    items = _translated(items, stored=self.settings.params.get("store") is True)
                async for item in items:
                    if back and isinstance(item, dict):
                        _rename_calls(item, back)
                    yield item
        except Exception as exc:
            mapped = map_error(exc, self._shown_url, secret=self._secrets, proxy=self._proxy)
            if mapped is None:
                raise
            raise mapped from exc

    async def _send(self, stack: AsyncExitStack, body: dict[str, Any], path: str = "/chat/completions") -> Any:
        """Send one request (to `path` under the base URL); return its `httpx.Response` (body unread, closed by
        `stack`) once its status and headers are in. A refusal raises the SDK's `APIStatusError` (body read), as
        `create` would."""
        import httpx
        from openai import APIConnectionError, Omit

        from .body import BodyTooLarge

        # Local servers need no key: then no Authorization header is sent, unless the config sets one.
        own_auth = any(k.lower() == "authorization" for k in self.settings.headers)
        headers: dict[str, Any] = {} if self.settings.api_key or own_auth else {"Authorization": Omit()}
        # `cast_to=httpx.Response` with `stream=True`: the SDK returns the response as it came, unread.
        # Bearer auth only, as `chat.completions.create` asks (post's default would add OPENAI_ADMIN_KEY).
        request = self._client().post(path, cast_to=httpx.Response, body=body, stream=True,
                                      options={"headers": headers, "security": {"bearer_auth": True},
                                               # credentials would go with a redirect to another host
                                               "follow_redirects": False})
        limit = self.settings.first_byte_timeout_s
        try:
            async with asyncio.timeout(limit):
                response = await request
        except APIConnectionError as exc:
            if isinstance(exc.__cause__, BodyTooLarge):  # an error body past the cap: final, not a connection error
                raise exc.__cause__ from None
            raise
        except TimeoutError:
            raise ProviderError(
                f"no response from {self._shown_url} within {limit:g} s of sending the request "
                "(first_byte_timeout); if the server is only slow to start (loading a model, a long prompt), "
                "raise first_byte_timeout in the config file or CROW_FIRST_BYTE_TIMEOUT") from None
        stack.push_async_callback(response.aclose)
        return response

    def _names_back(self, body: dict[str, Any]) -> dict[str, str]:
        """Tool name sent -> the tool's own name, for tools a `rename_tools` rule renamed in `body`."""

        back: dict[str, str] = {}
        for rule in self._rules:
            if isinstance(rule, RenameTools):  # the body has the new names: map them from the names offered
                offered = {**body, "tools": self._offered_tools}
                back.update(tool_names(offered, rule).back)
        return back

    def _adapt(self, exc: Exception, body: dict[str, Any], done: set[str]) -> list[Notice] | None:
        """The notices to send the request again with, once `exc` (a 400/422) was answered by a change to
        this client's requests ([]: changed silently); None when the refusal asks for no change crow can make.

        The refusal is read once (`wire.adapt.change_for`, against the message policy in force) into one
        `Change`, whose rules apply from then on: message-field rules through `wire.outgoing` (the outgoing
        copy of the history), the others to the request body. `done`, the changes made for this request,
        holds each change once, at most `_MAX_CHANGES` of them: a refusal that teaches nothing new ends the
        request with the server's message."""
        import openai

        if not isinstance(exc, openai.APIStatusError) or not (exc.status_code in (400, 422) or exc.status_code >= 500) \
                or len(done) >= _MAX_CHANGES:
            return None
        status, text = exc.status_code, _error_text(exc)
        adapting = self.settings.adapt_requests
        change = change_for(status, text, body, self._outgoing.policy() if adapting else None, adapting=adapting)
        if change is None:
            return None
        key = _json([r.to_json() for r in change.rules])
        if change.fields:
            if key in done:
                return None
            self._outgoing.add(r for r in change.rules if isinstance(r, FieldRule))
            kept: list[Rule] | None = None
        else:
            self._refused_value(status, text, change)
            configured = all(isinstance(r, SetParam) and r.target in self.settings.params for r in change.rules)
            kept = self._once if change.once else self._run_only if configured or not change.learned \
                else self._rules
            if key in done or all(r in kept for r in change.rules):
                return None
            kept += [r for r in change.rules if r not in kept]
        done.add(key)
        if not change.learned:  # adapting is off: crow's own `stream_options` just goes unsent
            return []
        self._why = f"{status}: {short_text(' '.join(text.split()), 200)}"  # stored with what it taught
        if change.once:
            then = ("for this request only, as the room a prompt leaves in the context window differs; "
                    "adapt_requests = false turns this off")
        elif kept is self._run_only:
            then = "for this run only: the value is yours, so a later run asks the server again"
        else:
            self._unsaved = True
            then = ("remembered for this server and model once it accepts the changed request; adapt_requests = "
                    "false turns this off")
        first = change.rules[0]
        asked = first.asked() if isinstance(first, FieldRule) else "refused the request"
        notices = [Notice(f"crow: the server {asked} ({status}): {change.why}; {change.describe(body)} "
                          f"({change.kinds()}) and sent the request again, {then}",
                          "reasoning_echo" if change.fields else "request_adapted", status=status)]
        if self.settings.trace:
            now = (f"messages now go as {self._outgoing.describe()}" if change.fields else
                   f"rules now applied to every request: {_json([r.to_json() for r in self._rules])}")
            notices.append(Notice(f"crow: debug: {change.describe(body)}: the server said "
                                  f"{short_text(' '.join(text.split()), 200)!r}; {now}", "adapt_debug"))
        return notices

    def _refused_value(self, status: int, text: str, change: Change) -> None:
        """Raise the one-line error for a change that would drop a value the user configured for its value (out
        of range, a typo): theirs to fix, never dropped on a server's word."""
        for rule in change.rules:
            if isinstance(rule, DropParam) and rule.target in self.settings.params \
                    and value_refused(text, rule.target, self.settings.params[rule.target]):
                where = self.settings.params_from \
                    or "[params] or [profiles.NAME.params] of your config, or the flag that sets it"
                raise ProviderError(
                    f"the server refused {rule.target} = {short_text(_json(self.settings.params[rule.target]), 40)}"
                    f" ({status}): {change.why}; fix it in {where}", status=status)

    def _images_refused(self, exc: Exception, body: dict[str, Any]) -> ProviderError | None:
        """The `vision.ImagesRefused` for a refusal of the request's image parts (remembered for this base URL
        and model, so the next request holding images fails before it is sent), or None for any other."""
        import openai


        if not isinstance(exc, openai.APIStatusError) \
                or not refuses_images(exc.status_code, _error_text(exc), body["messages"]):
            return None
        self.takes_images = False
        remembered = None
        if self.settings.adapt_requests and learn(self.settings.base_url, self.settings.model, images=False,
                                                  why=_error_text(exc)) is None:
            remembered = (f"remembered from {time.strftime('%Y-%m-%d %H:%M')} for {self._shown_url} (tools' images "
                          f"go to it as their names; crow facts forget --model {self.settings.model} forgets it, "
                          "and an image that is accepted clears it)")
        said, _code = _body_message(exc.body, exc.message)
        return ImagesRefused(self.settings.model, said, status=exc.status_code, remembered=remembered)

    def _images_taken(self) -> None:
        """A request holding images was accepted: the model takes images, whatever was known (a stored refusal,
        its name), and that is remembered in place of a refusal."""
        self.takes_images = True
        if self.settings.adapt_requests:
            learn(self.settings.base_url, self.settings.model, images=True, why="a request with images was accepted")

    def _final_refusal(self, exc: Exception) -> Notice | None:
        """Under --debug: why a 400/422 ends the request (`wire.adapt.change_for` had no change for it)."""
        import openai

        if not self.settings.trace or not isinstance(exc, openai.APIStatusError) \
                or exc.status_code not in (400, 422):
            return None

        why = "adapting requests is off (adapt_requests = false)" if not self.settings.adapt_requests \
            else "it names no part of the request that crow has not changed already"
        return Notice(f"crow: debug: the refusal ({exc.status_code}) is final: {why}: "
                      f"{short_text(' '.join(_error_text(exc).split()), 200)}", "adapt_debug")

    def _learned_now(self) -> dict[str, Any]:
        """What this client learned from the server's refusals (as `_remember` stores it)."""
        learned = dict(self._outgoing.learned())
        if self._rules[self._known:]:
            learned["request_rules"] = [r.to_json() for r in self._rules[self._known:]]
        return learned

    def _remember(self) -> Notice | None:
        """Store the rules learned in this run for this base URL + model, and the message fields refused or
        demanded (`wire.outgoing`), in `wire.facts` (never raises). When the store cannot be written, a notice
        saying so, the first time only: the run goes on, and the next run learns it again."""

        self._unsaved = False
        stored = recall(self.settings.base_url, self.settings.model).get("request_rules")
        merged = list(stored) if isinstance(stored, list) else []
        merged += [r.to_json() for r in self._rules[self._known:] if r.to_json() not in merged]
        failed = learn(self.settings.base_url, self.settings.model, request_rules=merged, why=self._why,
                       **self._outgoing.learned())
        if failed is None or self._unremembered:
            return None
        self._unremembered = True
        return Notice(f"crow: warning: what this server refused could not be remembered for later runs ({failed});"
                      " this run goes on with the change, and the next one learns it again", "facts_unwritable")

    def _retry(self, exc: Exception, retries: int) -> tuple[float, Notice | None]:
        """The wait and notice for another try after `exc`, or `(0, None)` when it is final."""
        import openai


        if retries >= self.settings.max_retries:
            return 0.0, None
        attempts = self.settings.max_retries + 1
        if isinstance(exc, openai.APIStatusError):
            headers = exc.response.headers
            if out_of_quota(exc.status_code, exc.body) or not should_retry(exc.status_code, headers):
                return 0.0, None
            wait = retry_wait_s(retries, headers)
            return wait, retry_notice(retries + 2, attempts, wait, exc.status_code)
        if isinstance(exc, openai.APIConnectionError):  # refused, reset, DNS, or a timeout before the answer
            if _certificate_refused(exc):  # the same certificate fails the same check again
                return 0.0, None
            wait = retry_wait_s(retries)
            timed_out = isinstance(exc, openai.APITimeoutError)
            return wait, retry_notice(retries + 2, attempts, wait, None, timed_out)
        return 0.0, None

    async def aclose(self) -> None:
        """Close the connection pool (and a recording transport's files)."""
        if self._sdk is not None:
            await self._sdk.close()


async def _translated(events: AsyncGenerator[dict[str, Any] | WarningEvent, None], *, stored: bool
                      ) -> AsyncGenerator[dict[str, Any] | WarningEvent, None]:
    """Responses API events as Chat Completions chunk dicts (`wire.responses.ChunkTranslator`; `stored`: the
    request had `store: true`), warnings as they are; raises `StreamCut` when the events end before
    `response.completed`."""
    translator = ChunkTranslator(stored=stored)
    async for event in events:
        if isinstance(event, dict):
            for chunk in translator.chunks(event):
                yield chunk
        else:
            yield event
    translator.end()


def _rename_calls(chunk: dict[str, Any], back: Mapping[str, str]) -> None:
    """Give streamed tool calls (in place) the names of the tools the server was offered renamed."""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        calls = delta.get("tool_calls") if isinstance(delta, dict) else None
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"] in back:
                fn["name"] = back[fn["name"]]


_MAX_CHANGES = 8
"""Changes `wire.adapt` may make to one request before its refusal is final (each one a different change)."""


async def _no_key() -> str:
    return ""


def import_in_background() -> threading.Thread:
    """Start importing what a request needs (the openai SDK, ~0.7 s of CPU, and the stream decoder) on
    a daemon thread, and return it: `crow chat` shows its prompt at once and the import runs while the
    user types. A request made before it ends waits for it (Python's per-module import lock), so the
    first turn never fails for it. Join the thread before the process ends: a daemon thread stopped
    inside an import would hold that module's lock during shutdown."""

    def load() -> None:
        with contextlib.suppress(Exception):  # a broken install fails the first request, as without this
            import openai  # noqa: F401

            from . import stream  # noqa: F401
        startup.loaded()

    thread = threading.Thread(target=load, name="crow-import-sdk", daemon=True)
    thread.start()
    return thread


def _error_text(exc: Any) -> str:
    """The raw body of an SDK status error (already read), else its message."""
    try:
        return str(exc.response.text)
    except Exception:
        return str(exc.message)


def _overflow_numbers(message: str) -> tuple[int | None, int | None]:
    """The context window and the prompt size a provider's overflow message names (None: not said)."""

    for pattern, window, size in OVERFLOW_NUMBERS:
        if (found := pattern.search(message)) is not None:
            return int(found.group(window)), int(found.group(size))
    if (found := OVERFLOW_WINDOW.search(message)) is None:
        return None, None
    prompt = next((int(m.group(1)) for p in OVERFLOW_PROMPT if (m := p.search(message)) is not None), None)
    return int(found.group(1)), prompt


def context_overflow(message: str, detail: Any = None, *, status: int | None = None,
                     code: str | int | None = None) -> ContextOverflow | None:
    """The `ContextOverflow` for a provider's error `message` (and its error object `detail`, where
    llama.cpp puts `n_ctx` / `n_prompt_tokens`), or None when it is some other refusal."""

    fields = detail if isinstance(detail, Mapping) else {}
    kind = " ".join(str(fields.get(k) or "") for k in ("type", "code"))

    if not CONTEXT_OVERFLOW.search(f"{message} {kind}"):
        return None
    n_ctx, prompt = fields.get("n_ctx"), fields.get("n_prompt_tokens")
    if not (isinstance(n_ctx, int) and isinstance(prompt, int)) or isinstance(n_ctx, bool):
        n_ctx, prompt = _overflow_numbers(message)
    numbers = f"{n_ctx} tokens" + (f", the request needs {prompt}" if prompt else "") if n_ctx else ""
    return ContextOverflow(f"the conversation is too long for the model's context window"
                           f"{f' ({numbers})' if numbers else ''}: {short_text(message)}",
                           n_ctx=n_ctx, prompt_tokens=prompt, status=status, code=code)


def _body_message(body: Any, fallback: str) -> tuple[str, Any]:

    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            # FastAPI/pydantic bodies (Mistral, vLLM's validators) say it in `detail`, not `message`
            message = err.get("message") or (refusal_reason(_json(err["detail"])) if err.get("detail") else fallback)
            return short_text(message if isinstance(message, str) else _json(message)), err.get("code")
        if isinstance(err, str):
            return short_text(err), None
    if isinstance(body, str) and body.strip():
        return short_text(body), None
    return short_text(fallback), None


def _full_message(body: Any) -> str:
    """The error message of a status error's body, uncut."""
    err = body.get("error", body) if isinstance(body, dict) else body
    message = err.get("message") if isinstance(err, dict) else err
    return message if isinstance(message, str) else ""


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def out_of_quota(status: int, body: Any) -> bool:
    """Whether an error answer says the account has no credit or quota left: a 402 (DeepSeek's "Insufficient
    Balance", OpenRouter), or a 429 whose error `code` or `type` is `insufficient_quota` (OpenAI; continue#10835:
    retried four times as a rate limit). A billing state: waiting does not end it."""
    if status == 402:
        return True
    err = body.get("error", body) if isinstance(body, dict) else None
    return status == 429 and isinstance(err, dict) and "insufficient_quota" in (err.get("code"), err.get("type"))


def _retry_after(headers: Any) -> float | None:

    try:
        return retry_after_s(headers)
    except (TypeError, AttributeError):
        return None


def _certificate_refused(exc: BaseException) -> bool:
    """Whether a failed connection was a server certificate that failed verification (the SDK's error, caused
    by httpx's, by httpcore's, by the `ssl` module's)."""
    seen: BaseException | None = exc
    for _ in range(8):  # bounded: a __context__ may lead back into the chain
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def map_error(exc: BaseException, base_url: str, secret: str | Iterable[str | None] | None = None,
              proxy: str | None = None) -> ProviderError | None:
    """The `ProviderError` for an SDK or httpx exception, or None when `exc` is not one of theirs.

    `base_url` is shown as given: pass it through `text.public_url` (no query, no credentials).
    `secret` (the API key, or every secret: the key and those in the base URL's query, `text.url_secrets`)
    is replaced by `[REDACTED]` (`text.mask_secrets`) in the message: providers echo a wrong key in their 401
    bodies, and the message is printed, sent in `run_finished.error` and may be stored. `proxy`: the proxy
    the requests went through (`wire.proxy`), named when it could not be reached.
    """
    mapped = _map_error(exc, base_url, proxy)
    secrets = [secret] if secret is None or isinstance(secret, str) else list(secret)
    if mapped is not None and mapped.args:
        message = str(mapped.args[0])
        clean = mask_secrets(message, secrets)
        if clean != message:
            mapped.args = (clean, *mapped.args[1:])
    return mapped


@dataclass(frozen=True, slots=True)
class _Refused:
    """What `_STATUS_ERRORS` makes an error of: an HTTP error answer, read."""

    status: int
    message: str
    code: str | None
    retry_after: float | None
    base_url: str
    location: str
    """A redirect's target (credentials and query removed), or ""."""


_STATUS_ERRORS: tuple[tuple[Callable[[int], bool], Callable[[_Refused], ProviderError]], ...] = (
    (lambda status: status == 401, lambda r: AuthError(
        f"authentication failed (401 unauthorized): {r.message}; check the API key (--api-key, CROW_API_KEY or "
        "OPENAI_API_KEY)", status=r.status, code=r.code)),
    (lambda status: status == 403, lambda r: AuthError(
        f"authentication failed (403 forbidden): {r.message}; the API key has no access to this model or endpoint",
        status=r.status, code=r.code)),
    (lambda status: 300 <= status < 400, lambda r: ProviderError(
        f"the server redirected the request ({r.status}) to {r.location or 'no address given'}; it was not followed "
        "(crow sends its credentials only to the configured server): set --base-url to the address it should be",
        status=r.status, code=r.code)),
    (lambda status: status == 429, lambda r: RateLimited(
        f"rate limited (429): {r.message}", status=r.status, code=r.code, retry_after=r.retry_after)),
    (lambda status: status == 404, lambda r: ProviderError(
        f"not found (404): {r.message}{wire_hint(r.message) or f'; check --base-url ({r.base_url}) and --model'}",
        status=r.status, code=r.code)),
    (lambda status: status >= 500, lambda r: ServerError(
        f"server error ({r.status}): {r.message}", status=r.status, code=r.code, retry_after=r.retry_after)),
    (lambda status: True, lambda r: ProviderError(
        f"request rejected ({r.status}): {r.message}{wire_hint(r.message)}", status=r.status, code=r.code)),
)
"""An HTTP error status → crow's error, the first row that applies (as httpx's `HTTPCORE_EXC_MAP` maps
httpcore's exceptions): what each says and whether it is retried follows from its class."""


def _map_error(exc: BaseException, base_url: str, proxy: str | None = None) -> ProviderError | None:
    import httpx
    import openai


    if isinstance(exc, ServerError) and exc.status in (None, 400):  # an in-stream error object
        return context_overflow(str(exc), status=exc.status, code=exc.code) or exc
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message, code = _body_message(exc.body, exc.message)
        detail = exc.body.get("error", exc.body) if isinstance(exc.body, dict) else None
        if status in (400, 413, 422) and (overflow := context_overflow(
                _full_message(exc.body) or message, detail, status=status, code=code)) is not None:
            return overflow
        retry_after = _retry_after(exc.response.headers)

        if retry_after is not None and math.isfinite(retry_after) and retry_after > MAX_RETRY_AFTER_S \
                and not 300 <= status < 400 and status not in (401, 403):
            message += (f"; the server asks to wait {retry_after:,.0f} s before trying again (crow waits at most "
                        f"{MAX_RETRY_AFTER_S:g} s: try later)")
        if out_of_quota(status, exc.body):
            said = f"{status} insufficient_quota" if status == 429 else str(status)
            return QuotaExceeded(f"no credit or quota left ({said}): {message}; this is the account's plan or billing, "
                                 "not a rate: add credit or pick another key or server (not retried)",
                                 status=status, code=code)
        refused = _Refused(status, message, code, retry_after, base_url,
                           public_url(exc.response.headers.get("location", "")))
        return next(make(refused) for applies, make in _STATUS_ERRORS if applies(status))
    if isinstance(exc, openai.APITimeoutError):  # before the stream started: retried already
        return ProviderError(f"no answer from {base_url} within the timeout (idle_timeout), after retries")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return ProviderError(f"cannot reach {base_url}{through(proxy)}: "
                             f"{short_text(str(cause) or type(cause).__name__)}")
    if isinstance(exc, openai.APIError):  # any other SDK error that carries a body

        return stream_error(exc.body if exc.body is not None else exc.message)
    if isinstance(exc, httpx.TimeoutException):
        return StreamCut("the stream went idle past the timeout")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.NetworkError)):
        return StreamCut(f"the stream broke mid-way ({short_text(str(exc) or type(exc).__name__, 120)})")
    return None

