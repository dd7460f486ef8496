"""The streaming Chat Completions client: history in, raw chunk dicts (and notices) out.

Built on the openai SDK's public surface, imported lazily (~0.7 s): its `post()` sends the body exactly as crow
built it and hands back the raw `httpx.Response`, whose bytes `wire.stream` decodes into raw dicts, so provider
quirks reach the accumulator untouched; the SDK gives auth, the base URL and its query, headers, timeouts and
the transport. Its own retries are off: crow retries 408/409/429/5xx and connection errors before a stream
starts (`wire.retries`), each retry a `Notice(code="retrying")`. Errors are mapped by `wire.errors`.

A 400/422 refusal is read once (`_adapt`, `wire.change.change_for`) into a `Change` the client's
`ServerProfile.learn`s (this request, this run, or remembered per base URL + model in `wire.facts`), and the
request is sent again with a `Notice`; the history keeps what really happened (`wire.outgoing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Mapping
from contextlib import AsyncExitStack, aclosing
from typing import TYPE_CHECKING, Any

from .. import startup
from ..errors import AuthError, ProviderError
from ..events import Notice, WarningEvent
from ..history import Message
from ..modes import REASONING_ECHO, ReasoningEcho
from ..text import header_secrets, public_url, short_text, url_secrets
from .change import Change, change_for
from .errors import body_message, error_text, map_error, retry_after
from .facts import facts_path, learn, problems, recall
from .outgoing import Outgoing
from .preload import import_in_background
from .profile import build_profile
from .proxy import proxy_for
from .responses import as_chunks
from .responses import request_body as responses_body
from .rules import FieldRule, RenameTools, apply_rules, tool_names
from .settings import ClientSettings, split_base_url
from .slots import server_slots
from .vision import ImagesRefused, holds_images, known_text_only, refuses_images

if TYPE_CHECKING:
    from .stream import AfterDone

__all__ = ["ChatClient", "ClientSettings", "ReasoningEcho", "import_in_background", "map_error",
           "split_base_url"]


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
        self._unremembered = False  # the facts store could not be written: said once
        self._traced = False
        self._fields_traced = False
        self._offered_tools: list[dict[str, Any]] = []

        known = recall(settings.base_url, settings.model) if settings.adapt_requests else {}
        self.profile = build_profile(settings.base_url, settings.model, settings.provider, known,
                                     rules=settings.adapt_requests)
        """What is known of this server (`wire.profile`): built-in knowledge, the config's `[provider]` table, then
        what earlier runs learned (none, and no request rule, when `adapt_requests` is off), and what this run
        learns (`ServerProfile.learn`)."""

        self.takes_images = not known_text_only(settings.model, known)
        """Whether the model may be sent images: False once known text-only (`wire.vision`): by its name, or
        learned from a refusal of image parts (then requests holding images fail before they are sent)."""

        self._facts_problems = problems() if settings.adapt_requests else []  # said once, before the first request
        # what goes back of what servers attached to messages, and the fields this one refused or demanded
        self._outgoing = Outgoing(settings.reasoning_echo, reasoning_fields=self.profile.reasoning_fields,
                                  known=self.profile.message_facts(), author=self.author)
        # message-field rules among the request rules (built-in or configured: learned ones are the message facts
        # above) are the message policy's (`wire.outgoing`)
        if fields := [r for r in self.profile.request_rules if isinstance(r, FieldRule)]:
            self._outgoing.add(fields, learned=False)

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
        """`messages` as they are sent (`wire.outgoing`): what each server attached goes back, reasoning as
        `reasoning_echo` says, minus what this server refused; copies where changed, the history never."""
        return self._outgoing.messages(messages)

    def request_body(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        """The JSON body of one streamed turn (OpenAI Chat Completions `create` with `stream: true`)."""
        body: dict[str, Any] = {**self.settings.params, "model": self.settings.model,
                                "messages": self.outgoing_messages(messages), "stream": True}
        if tools:
            body["tools"] = tools
        self._offered_tools = tools or []
        body["stream_options"] = {"include_usage": True}  # dropped by a rule where the server refuses it
        if rules := self.profile.rules:
            body = apply_rules(body, rules)
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

        # an image in the messages is one the person attached: sent whatever is known, the server's answer is news
        for warning in self._facts_problems:
            yield Notice(warning, "facts_damaged")
        self._facts_problems = []
        if self.settings.trace and not self._fields_traced:
            self._fields_traced = True
            yield Notice(f"crow: debug: server profile {self.profile.name!r}; messages go as "
                         f"{self._outgoing.describe()}", "adapt_debug")
            yield Notice("crow: debug: server profile values (and the layer each came from): " + "; ".join(
                f"{key} {value} ({layer})" for key, value, layer in self.profile.described()), "adapt_debug")
        if self.settings.trace and self.profile.every_request and not self._traced:
            self._traced = True
            yield Notice(f"crow: debug: adapting every request to this server as known or learned before: "
                         f"{Change(tuple(self.profile.every_request), '').describe()}", "adapt_debug")
        try:
            async with AsyncExitStack() as stack:
                retries, adapted = 0, set[str]()
                self.profile.new_request()
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
                            self._takes_images(True, "a request with images was accepted")  # what was known is stale
                        break
                    except Exception as exc:
                        if (refused := self._images_refused(exc, body)) is not None:
                            raise refused from exc  # final: no change to the request makes the model see
                        # a refusal is read against the Chat Completions body: not on the Responses wire
                        if not responses and (notices := self._adapt(exc, body, adapted)) is not None:
                            for notice in notices:
                                yield notice
                            continue
                        wait, retry = retry_after(exc, retries, self.settings.max_retries)
                        if retry is None:
                            if (final := self._final_refusal(exc)) is not None:
                                yield final
                            raise
                        yield retry
                        retries += 1
                        await asyncio.sleep(wait)
                if self.profile.unsaved:  # the server took the changed request: remember the change
                    if (unsaved := self._remember()) is not None:
                        yield unsaved
                    if self.settings.trace:
                        rules = _json([r.to_json() for r in self.profile.learned()])
                        yield Notice(f"crow: debug: remembered for {self._shown_url} {self.settings.model} in "
                                     f"{facts_path()}: request_rules {rules}", "adapt_debug")
                back = self._names_back(body)
                items = iter_chunks(response.aiter_bytes(), response.headers.get("content-type", ""),
                                    self._after_done)
                if responses:  # its events as chunks (`wire.responses`); the chat path pays nothing for it
                    items = as_chunks(items, stored=self.settings.params.get("store") is True)
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
        for rule in self.profile.every_request:
            if isinstance(rule, RenameTools):  # the body has the new names: map them from the names offered
                offered = {**body, "tools": self._offered_tools}
                back.update(tool_names(offered, rule).back)
        return back

    def _adapt(self, exc: Exception, body: dict[str, Any], done: set[str]) -> list[Notice] | None:
        """The notices to send the request again with, once `exc` (a 400/422) was answered by a change the
        profile learned (`ServerProfile.learn`; []: changed silently); None when the refusal asks for no change
        crow can make. `done`, the changes made for this request, holds each once, at most `_MAX_CHANGES`: a
        refusal that teaches nothing new ends the request with the server's message."""
        import openai

        if not isinstance(exc, openai.APIStatusError) or not (exc.status_code in (400, 422) or exc.status_code >= 500) \
                or len(done) >= _MAX_CHANGES:
            return None
        status, text = exc.status_code, error_text(exc)
        adapting = self.settings.adapt_requests
        change = change_for(status, text, body, self._outgoing.policy() if adapting else None, adapting=adapting)
        key = _json([r.to_json() for r in change.rules]) if change is not None else ""
        if change is None or key in done or (kept := self.profile.learn(
                change, status=status, text=text, params=self.settings.params,
                params_from=self.settings.params_from)) is None:
            return None
        if change.fields:
            self._outgoing.add(r for r in change.rules if isinstance(r, FieldRule))
        done.add(key)
        if not change.learned:  # adapting is off: crow's own `stream_options` just goes unsent
            return []
        then = {"once": "for this request only, as the room a prompt leaves in the context window differs; "
                        "adapt_requests = false turns this off",
                "run": "for this run only: the value is yours, so a later run asks the server again",
                "remembered": "remembered for this server and model once it accepts the changed request; "
                              "adapt_requests = false turns this off"}[kept]
        first = change.rules[0]
        asked = first.asked() if isinstance(first, FieldRule) else "refused the request"
        notices = [Notice(f"crow: the server {asked} ({status}): {change.why}; {change.describe(body)} "
                          f"({change.kinds()}) and sent the request again, {then}",
                          "reasoning_echo" if change.fields else "request_adapted", status=status)]
        if self.settings.trace:
            now = (f"messages now go as {self._outgoing.describe()}" if change.fields else
                   f"rules now applied to every request: {_json([r.to_json() for r in self.profile.every_request])}")
            notices.append(Notice(f"crow: debug: {change.describe(body)}: the server said "
                                  f"{short_text(' '.join(text.split()), 200)!r}; {now}", "adapt_debug"))
        return notices

    def _images_refused(self, exc: Exception, body: dict[str, Any]) -> ProviderError | None:
        """The `vision.ImagesRefused` for a refusal of the request's image parts (remembered for this base URL
        and model, so the next request holding images fails before it is sent), or None for any other."""
        import openai

        if not isinstance(exc, openai.APIStatusError) \
                or not refuses_images(exc.status_code, error_text(exc), body["messages"]):
            return None
        remembered = None
        if self._takes_images(False, error_text(exc)):
            remembered = (f"remembered from {time.strftime('%Y-%m-%d %H:%M')} for {self._shown_url} (tools' images "
                          f"go to it as their names; crow facts forget --model {self.settings.model} forgets it, "
                          "and an image that is accepted clears it)")
        said, _code = body_message(exc.body, exc.message)
        return ImagesRefused(self.settings.model, said, status=exc.status_code, remembered=remembered)

    def _takes_images(self, taken: bool, why: str) -> bool:
        """Whether the model takes images, as a refusal of image parts or an accepted request with images just
        showed, whatever was known (a stored fact, its name): True when it is remembered for later runs."""
        self.takes_images = taken
        return self.settings.adapt_requests and learn(self.settings.base_url, self.settings.model, images=taken,
                                                      why=why) is None

    def _final_refusal(self, exc: Exception) -> Notice | None:
        """Under --debug: why a 400/422 ends the request (`wire.change.change_for` had no change for it)."""
        import openai

        if not self.settings.trace or not isinstance(exc, openai.APIStatusError) \
                or exc.status_code not in (400, 422):
            return None
        why = "adapting requests is off (adapt_requests = false)" if not self.settings.adapt_requests \
            else "it names no part of the request that crow has not changed already"
        return Notice(f"crow: debug: the refusal ({exc.status_code}) is final: {why}: "
                      f"{short_text(' '.join(error_text(exc).split()), 200)}", "adapt_debug")

    def _remember(self) -> Notice | None:
        """Store what this run learned for this base URL + model in `wire.facts` (`ServerProfile.remembered`;
        never raises). When the store cannot be written, a notice saying so, the first time only: the run goes
        on, and the next run learns it again."""
        facts = self.profile.remembered(recall(self.settings.base_url, self.settings.model))
        failed = learn(self.settings.base_url, self.settings.model, why=self.profile.why, **facts)
        if failed is None or self._unremembered:
            return None
        self._unremembered = True
        return Notice(f"crow: warning: what this server refused could not be remembered for later runs ({failed});"
                      " this run goes on with the change, and the next one learns it again", "facts_unwritable")

    def text_calls_recovered(self, fmt: str) -> Notice | None:
        """The loop ran tool calls this model wrote as text in format `fmt` (`wire.textcalls`): remembered as its
        `text_call_format` when crow adapts requests; a notice the first time the store cannot be written."""
        if not self.settings.adapt_requests:
            return None
        failed = learn(self.settings.base_url, self.settings.model, text_call_format=fmt)  # no refusal: no why
        if failed is None or self._unremembered:
            return None
        self._unremembered = True
        return Notice(f"crow: warning: the format this model writes its tool calls in could not be remembered for "
                      f"later runs ({failed}); the run goes on", "facts_unwritable")

    async def aclose(self) -> None:
        """Close the connection pool (and a recording transport's files)."""
        if self._sdk is not None:
            await self._sdk.close()


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
"""Changes `wire.change` may make to one request before its refusal is final (each one a different change)."""


async def _no_key() -> str:
    return ""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
