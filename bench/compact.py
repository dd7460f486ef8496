"""A 2,000-message session loads, compacts and sends in well under a second.

Stores a session of 500 exchanges (user, assistant tool call, a 2 KB tool result, answer: 2,000
messages) in a fresh SQLite file, then times, each the best of 3:

* load     `SessionStore.load` (read and repair),
* compact  `Compactor.compact` with an in-process model that answers the summary at once (the
           model's own time is not crow's),
* send all building the request of the whole history (normalised, serialised) before compaction,
* send     building the next request: the checkpoint's view and the newer messages, normalised,
           and the JSON body serialised, as `ChatClient.request_body` would send it.

    .venv/bin/python bench/compact.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from crow_cli.context.budget import Budget, estimate_tokens
from crow_cli.context.compact import Compactor
from crow_cli.history import Message, ToolCall, assistant_message, tool_message, user_message
from crow_cli.sessions import SessionStore

EXCHANGES = 500


class _Summariser:
    async def stream(self, messages: list[Message], tools: list[dict[str, Any]] | None = None
                     ) -> AsyncIterator[dict[str, Any]]:
        yield {"choices": [{"index": 0, "delta": {"content": "SUMMARY: many reads"}, "finish_reason": None}]}
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


def _session(store: SessionStore) -> str:
    info = store.create(model="bench")
    for n in range(EXCHANGES):  # the set-up, not timed
        for m in (user_message(f"request {n}"), assistant_message(None, [ToolCall(f"c{n}", "read_file", "{}")]),
                  tool_message(f"c{n}", "x" * 2048), assistant_message(f"answer {n}")):
            store.append(info.id, m)
    store.release(info.id)
    return info.id


def _best(fn: Any, runs: int = 3) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = SessionStore(Path(folder) / "bench.db")
        sid = _session(store)
        load_s, history = _best(lambda: store.load(sid))
        history.append(user_message("go on"))
        window = int(estimate_tokens(history) / 0.9)

        def compact() -> Compactor:
            compactor = Compactor(Budget(window=window))

            async def run() -> None:
                async for _ in compactor.compact(history, _Summariser()):
                    pass

            asyncio.run(run())
            return compactor

        full_s, full = _best(lambda: json.dumps({"model": "bench", "messages": Compactor(Budget()).outgoing(history),
                                                  "stream": True}))
        compact_s, compactor = _best(compact)
        send_s, body = _best(lambda: json.dumps({"model": "bench", "messages": compactor.outgoing(history),
                                                 "stream": True}))
        store.close()
    print(f"session: {len(history):,} messages, ~{estimate_tokens(history):,} tokens, window {window:,}")
    print(f"load     {load_s * 1000:8.1f} ms")
    print(f"send all {full_s * 1000:8.1f} ms  (before compaction: {len(full):,} bytes of request body)")
    print(f"compact  {compact_s * 1000:8.1f} ms  (to {compactor.checkpoint.tokens_after:,} tokens)"
          if compactor.checkpoint else "compact: no checkpoint")
    print(f"send     {send_s * 1000:8.1f} ms  ({len(body):,} bytes of request body)")
    print(f"total    {(load_s + compact_s + send_s) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
