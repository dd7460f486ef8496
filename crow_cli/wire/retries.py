"""Making the openai SDK's own retries visible, without re-implementing its retry loop.

The SDK (`openai._base_client.AsyncAPIClient._retry_request` → `request`) retries 408/409/429/5xx
responses and connection errors/timeouts before a stream starts: for each retry it calls
`_sleep_for_retry(retries_taken=…, max_retries=…, options=…, response=…)`, which computes the wait
with `_calculate_retry_timeout(…)` (`Retry-After-Ms`, `Retry-After`, else exponential backoff with
jitter) and sleeps. `ReportingOpenAI` wraps those two hooks: it notes the failed attempt, lets the SDK
compute the wait, reports a `Notice(code="retrying")` to the sink of the current context, and lets
the SDK sleep. Nothing about when or how long to retry changes. (Both hooks are private SDK methods,
read in openai 2.54; `tests/wire/test_retry_notice.py` fails if a release stops calling them. The
alternatives observe less: the SDK's INFO log line has the wait but not the status, an httpx response
hook has the status but not the SDK's decision or wait.)

Imported only once the SDK is (it subclasses `openai.AsyncOpenAI`).
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable
from typing import Any

import httpx
from openai import AsyncOpenAI

from ..events import Notice

__all__ = ["ReportingOpenAI", "retry_notice", "retry_sink"]

retry_sink: contextvars.ContextVar[Callable[[Notice], None] | None] = contextvars.ContextVar(
    "crow_retry_sink", default=None)
"""Where `ReportingOpenAI` sends retry notices in this context (None: nowhere)."""


def _reason(status: int | None, error: BaseException | None) -> str:
    if status == 429:
        return "rate limited (429)"
    if status is not None and status >= 500:
        return f"server error ({status})"
    if status == 408:
        return "request timeout (408)"
    if status is not None:
        return f"HTTP {status}"
    if isinstance(error, httpx.TimeoutException):
        return "no answer within the timeout"
    return "cannot connect"


def _seconds(wait: float) -> str:
    return f"{wait:.2f}".rstrip("0").rstrip(".") or "0"


def retry_notice(attempt: int, attempts: int, wait_s: float, status: int | None,
                 error: BaseException | None = None) -> Notice:
    """The notice for one retry: `attempt` is the number of the request about to be sent (2 = the first
    retry) out of `attempts`; `wait_s` the seconds the SDK waits first; `status` the HTTP status of the
    failed attempt (None for a connection error or timeout, described by `error`)."""
    message = f"crow: {_reason(status, error)}; retrying in {_seconds(wait_s)} s (attempt {attempt} of {attempts})"
    return Notice(message, "retrying", attempt=attempt, wait_s=round(wait_s, 3), status=status)


class ReportingOpenAI(AsyncOpenAI):
    """`openai.AsyncOpenAI` that reports each of its retries to `retry_sink` (see the module docstring)."""

    _crow_pending: tuple[int, int, int | None, BaseException | None] | None = None

    async def _sleep_for_retry(self, *, retries_taken: int, max_retries: int, options: Any,
                               response: httpx.Response | None) -> None:
        # Called inside the SDK's `except` block for a failed send: exc_info is that error. The SDK
        # computes the wait synchronously before its first await, so this attribute cannot be raced.
        error = sys.exc_info()[1] if response is None else None
        self._crow_pending = (retries_taken, max_retries, response.status_code if response is not None else None,
                              error)
        try:
            await super()._sleep_for_retry(retries_taken=retries_taken, max_retries=max_retries, options=options,
                                           response=response)
        finally:
            self._crow_pending = None

    def _calculate_retry_timeout(self, remaining_retries: int, options: Any,
                                 response_headers: httpx.Headers | None = None) -> float:
        wait = super()._calculate_retry_timeout(remaining_retries, options, response_headers)
        pending, self._crow_pending = self._crow_pending, None
        sink = retry_sink.get()
        if pending is not None and sink is not None:
            retries_taken, max_retries, status, error = pending
            sink(retry_notice(retries_taken + 2, max_retries + 1, wait, status, error))
        return wait
