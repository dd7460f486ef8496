"""Foreign errors mapped to crow's, once: the openai SDK's and httpx's exceptions become `ProviderError`s.

Two tables decide, as httpx's `_transports/default.py` maps httpcore's exceptions: `_STATUS_ERRORS` an HTTP
error answer by its status, `_class_errors()` any other exception by its class (the most specific class
first). Beside them, the readers of an error answer's body (`body_message`, `error_text`), `stream_error`,
the error for an `{"error": …}` object a server sends inside a stream, and `retry_after`: whether a foreign
error before a stream started is tried again (`wire.retries` has the policy). The SDK and httpx are imported where
they are used (a surface imports this module before either is loaded).
"""

from __future__ import annotations

import functools
import json
import math
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import AuthError, ContextOverflow, ProviderError, QuotaExceeded, RateLimited, ServerError, StreamCut
from ..events import Notice
from ..text import mask_secrets, public_url, short_text
from .proxy import through
from .refusal import reason as refusal_reason
from .retries import MAX_RETRY_AFTER_S, retry_after_s, retry_notice, retry_wait_s, should_retry
from .wording import CONTEXT_OVERFLOW, OVERFLOW_NUMBERS, OVERFLOW_PROMPT, OVERFLOW_WINDOW

__all__ = ["body_message", "certificate_refused", "context_overflow", "error_text", "map_error", "out_of_quota",
           "retry_after", "stream_error"]


def stream_error(error: Any) -> ServerError:
    """The `ServerError` for an `{"error": …}` object a server sent inside a stream (vLLM, LiteLLM)."""
    if isinstance(error, Mapping):
        message = str(error.get("message") or "the server reported an error in the stream")
        code = error.get("code")
    else:
        message, code = str(error), None
    status = code if isinstance(code, int) and 400 <= code < 600 else None
    suffix = f" (code {code})" if code is not None else ""
    return ServerError(f"server error: {message}{suffix}", status=status, code=code)


def error_text(exc: Any) -> str:
    """The raw body of an SDK status error (already read), else its message."""
    try:
        return str(exc.response.text)
    except Exception:
        return str(exc.message)


def body_message(body: Any, fallback: str) -> tuple[str, Any]:
    """The short message and the error `code` of an error answer's decoded `body` (`fallback` when it says none)."""
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
    return json.dumps(value, ensure_ascii=False)


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


def certificate_refused(exc: BaseException) -> bool:
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


def retry_after(exc: BaseException, retries: int, max_retries: int) -> tuple[float, Notice | None]:
    """The wait (seconds) and notice for another try after `exc`, failed before a stream started, when
    `retries` were made of `max_retries`; `(0, None)` when it is final: an error answer `wire.retries` does not
    retry, no quota left, a certificate that failed verification, or no retry left."""
    import openai

    if retries >= max_retries:
        return 0.0, None
    attempts = max_retries + 1
    if isinstance(exc, openai.APIStatusError):
        headers = exc.response.headers
        if out_of_quota(exc.status_code, exc.body) or not should_retry(exc.status_code, headers):
            return 0.0, None
        wait = retry_wait_s(retries, headers)
        return wait, retry_notice(retries + 2, attempts, wait, exc.status_code)
    if isinstance(exc, openai.APIConnectionError):  # refused, reset, DNS, or a timeout before the answer
        if certificate_refused(exc):  # the same certificate fails the same check again
            return 0.0, None
        wait = retry_wait_s(retries)
        timed_out = isinstance(exc, openai.APITimeoutError)
        return wait, retry_notice(retries + 2, attempts, wait, None, timed_out)
    return 0.0, None


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


def _hint(message: str) -> str:
    """`responses.wire_hint` (imported here: `responses` reads `stream_error` of this module)."""
    from .responses import wire_hint

    return wire_hint(message)


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
        f"not found (404): {r.message}{_hint(r.message) or f'; check --base-url ({r.base_url}) and --model'}",
        status=r.status, code=r.code)),
    (lambda status: status >= 500, lambda r: ServerError(
        f"server error ({r.status}): {r.message}", status=r.status, code=r.code, retry_after=r.retry_after)),
    (lambda status: True, lambda r: ProviderError(
        f"request rejected ({r.status}): {r.message}{_hint(r.message)}", status=r.status, code=r.code)),
)
"""An HTTP error status → crow's error, the first row that applies (as httpx's `HTTPCORE_EXC_MAP` maps
httpcore's exceptions): what each says and whether it is retried follows from its class."""

_Maker = Callable[[Any, str, "str | None"], "ProviderError | None"]
"""`make(exc, base_url, proxy)`: crow's error for one foreign exception (None: not one crow maps)."""


@functools.cache
def _class_errors() -> tuple[tuple[type[BaseException], _Maker], ...]:
    """A foreign exception other than an error answer → crow's error, the first class `exc` is an instance of
    (most specific first). Built on first use: it names the SDK's and httpx's classes."""
    import httpx
    import openai

    return (
        (openai.APIStatusError, _status_error),
        (openai.APITimeoutError, lambda exc, url, proxy: ProviderError(  # before the stream started: retried
            f"no answer from {url} within the timeout (idle_timeout), after retries")),
        (openai.APIConnectionError, lambda exc, url, proxy: ProviderError(
            f"cannot reach {url}{through(proxy)}: "
            f"{short_text(str(exc.__cause__ or exc) or type(exc.__cause__ or exc).__name__)}")),
        # any other SDK error that carries a body
        (openai.APIError, lambda exc, url, proxy: stream_error(exc.body if exc.body is not None else exc.message)),
        (httpx.TimeoutException, lambda exc, url, proxy: StreamCut("the stream went idle past the timeout")),
        (httpx.RemoteProtocolError, _broken),
        (httpx.ReadError, _broken),
        (httpx.NetworkError, _broken),
    )


def _broken(exc: Any, base_url: str, proxy: str | None) -> ProviderError:
    return StreamCut(f"the stream broke mid-way ({short_text(str(exc) or type(exc).__name__, 120)})")


def _status_error(exc: Any, base_url: str, proxy: str | None) -> ProviderError:
    """crow's error for an SDK `APIStatusError` (its body read): a context overflow, no quota left, else the
    row of `_STATUS_ERRORS` for its status."""
    status = exc.status_code
    message, code = body_message(exc.body, exc.message)
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


def _map_error(exc: BaseException, base_url: str, proxy: str | None = None) -> ProviderError | None:
    if isinstance(exc, ServerError) and exc.status in (None, 400):  # an in-stream error object
        return context_overflow(str(exc), status=exc.status, code=exc.code) or exc
    if isinstance(exc, ProviderError):
        return exc
    return next((make(exc, base_url, proxy) for cls, make in _class_errors() if isinstance(exc, cls)), None)
