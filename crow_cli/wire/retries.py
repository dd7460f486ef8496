"""When and how long to retry a request whose stream has not started, and the notice that says so.

crow runs its own small retry loop (`wire.client.ChatClient.stream`; the SDK's own retries are off,
`max_retries=0`), so each retry is yielded as a `Notice(code="retrying")` before its wait. The policy
is the one the openai SDK documents for its clients, and that OpenAI-compatible servers expect:

* retried: 408, 409, 429 and 5xx responses, and connection errors (refused, reset, DNS, connect timeout);
  never a 429 that says the account has no quota left (`errors.out_of_quota`: a billing state, not a rate);
  a server's `x-should-retry: true|false` header (OpenAI) overrides the status;
* the wait is the server's `Retry-After-Ms` (milliseconds) or `Retry-After` (seconds or an HTTP date)
  when it lies in (0, 120] seconds; a longer `Retry-After` is not waited for (the error is final);
* otherwise exponential backoff: 0.5 s · 2^(retries so far), at most 8 s, minus up to 25 % jitter.

Pure: no I/O, no SDK import.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping

from ..events import Notice

__all__ = ["MAX_RETRY_AFTER_S", "backoff_s", "retry_after_s", "retry_notice", "retry_wait_s", "should_retry"]

INITIAL_DELAY_S = 0.5
MAX_DELAY_S = 8.0
MAX_RETRY_AFTER_S = 120.0
"""A server-directed wait longer than this (seconds) is not waited for: the error is final."""


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked to wait (`Retry-After-Ms`, else `Retry-After` in seconds or as an HTTP
    date), or None when it said nothing usable. Header names are matched case-insensitively when
    `headers` is an `httpx.Headers`; a plain dict must use lower-case names."""
    if headers is None:
        return None
    try:
        return float(headers.get("retry-after-ms") or "") / 1000
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    try:
        return email.utils.mktime_tz(parsed) - time.time()
    except (OverflowError, ValueError, OSError):
        return None


def should_retry(status: int, headers: Mapping[str, str] | None = None) -> bool:
    """Whether a response with this HTTP `status` is worth another try (see the module docstring)."""
    wait = retry_after_s(headers)
    if wait is not None and math.isfinite(wait) and wait > MAX_RETRY_AFTER_S:
        return False
    verdict = (headers or {}).get("x-should-retry")
    if verdict in ("true", "false"):
        return verdict == "true"
    return status in (408, 409, 429) or status >= 500


def backoff_s(retries_taken: int) -> float:
    """The wait before retry number `retries_taken + 1` when the server named none: 0.5 s doubling per
    retry, at most 8 s, with 0–25 % jitter taken off."""
    base = min(INITIAL_DELAY_S * 2.0 ** min(retries_taken, 1000), MAX_DELAY_S)
    return base * (1 - 0.25 * random.random())


def retry_wait_s(retries_taken: int, headers: Mapping[str, str] | None = None) -> float:
    """Seconds to wait before the next try: the server's `Retry-After(-Ms)` when it is in (0, 120],
    else `backoff_s(retries_taken)`."""
    wait = retry_after_s(headers)
    if wait is not None and math.isfinite(wait) and 0 < wait <= MAX_RETRY_AFTER_S:
        return wait
    return backoff_s(retries_taken)


def _reason(status: int | None, timed_out: bool) -> str:
    if status == 429:
        return "rate limited (429)"
    if status is not None and status >= 500:
        return f"server error ({status})"
    if status == 408:
        return "request timeout (408)"
    if status is not None:
        return f"HTTP {status}"
    if timed_out:
        return "no answer within the timeout"
    return "cannot connect"


def _seconds(wait: float) -> str:
    return f"{wait:.2f}".rstrip("0").rstrip(".") or "0"


def retry_notice(attempt: int, attempts: int, wait_s: float, status: int | None, timed_out: bool = False) -> Notice:
    """The notice for one retry.

    Args:
        attempt: the number of the request about to be sent (2 = the first retry).
        attempts: how many requests may be sent in all (`max_retries + 1`).
        wait_s: the seconds waited before it.
        status: the HTTP status of the failed request; None for a connection error or timeout.
        timed_out: for `status` None, whether the failure was a timeout rather than a refused connection.
    """
    message = (f"crow: {_reason(status, timed_out)}; retrying in {_seconds(wait_s)} s "
               f"(attempt {attempt} of {attempts})")
    return Notice(message, "retrying", attempt=attempt, wait_s=round(wait_s, 3), status=status)
