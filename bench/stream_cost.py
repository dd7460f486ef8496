"""Per-chunk cost of the stream path, each beside its floor, in one run (min of 5).

1. The accumulator on one tool call whose arguments arrive in 2 000 / 8 000 / 32 000 fragments, beside a
   bare index-keyed dict loop over the same chunk dicts (the reference algorithm of
   shared/reference/streaming-tool-calls.md §2). Target: ≤ 3×.
2. `crow run` on a 20 000-chunk text stream from a local server, beside the httpx + json floor that reads
   the same stream (`run_cost.HTTPX_JSON`): CPU (user + sys) of each process. Target: ≤ 2.5×.

    .venv/bin/python bench/stream_cost.py [--runs 5] [--chunks 20000]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness import child_cpu, isolated_env
from run_cost import HTTPX_JSON

from crow_cli.wire.accumulate import StreamAccumulator

CROW = str(Path(sys.executable).with_name("crow"))


def tool_call_chunks(fragments: int) -> list[dict[str, Any]]:
    """One call: a header chunk, then its arguments (a JSON object) in `fragments` pieces of 8 characters."""
    text = json.dumps({"blob": "x" * (fragments * 8 - 12)})
    pieces = [text[i:i + 8] for i in range(0, len(text), 8)]
    head = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "write_file", "arguments": ""}}
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [head]}, "finish_reason": None}]}]
    chunks += [{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": p}}]},
                             "finish_reason": None}]} for p in pieces]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return chunks


def bare_loop(chunks: list[dict[str, Any]]) -> str:
    """The reference accumulator: a dict keyed by index, id/name set once, fragments joined at the end."""
    calls: dict[int, list[Any]] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            for tc in choice["delta"].get("tool_calls") or ():
                entry = calls.setdefault(tc["index"], ["", "", []])
                if tc.get("id"):
                    entry[0] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    entry[1] = fn["name"]
                if fn.get("arguments"):
                    entry[2].append(fn["arguments"])
    return "".join(calls[0][2])


def crow_accumulator(chunks: list[dict[str, Any]]) -> str:
    acc = StreamAccumulator()
    for chunk in chunks:
        acc.feed(chunk)
    turn, _ = acc.finish()
    return turn.tool_calls[0].arguments


def best_pair(runs: int, chunks: list[dict[str, Any]]) -> tuple[float, float]:
    """Min of `runs` seconds per pass for the bare loop and the accumulator, sampled alternately (a busy
    moment hits both alike); a sample is enough passes to cover ~32 000 chunks, so small sizes are not
    timer noise."""
    passes = max(1, 32_000 // len(chunks))
    best = [float("inf"), float("inf")]
    for _ in range(runs):
        for n, fn in enumerate((bare_loop, crow_accumulator)):
            gc.collect()
            start = time.perf_counter()
            for _ in range(passes):
                fn(chunks)
            best[n] = min(best[n], (time.perf_counter() - start) / passes)
    return best[0], best[1]


class _Stream(BaseHTTPRequestHandler):
    """Answers `/big/…` with `big` (the long stream) and anything else with `one` (a one-chunk stream)."""

    protocol_version = "HTTP/1.1"
    big = b""
    one = b""

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = self.big if self.path.startswith("/big/") else self.one
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def text_stream(chunks: int) -> bytes:
    frame = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    out = [json.dumps({**frame, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                             "finish_reason": None}]})]
    piece = json.dumps({**frame, "choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}]})
    out += [piece] * chunks
    out.append(json.dumps({**frame, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    return ("".join(f"data: {o}\n\n" for o in out) + "data: [DONE]\n\n").encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=20_000)
    args = parser.parse_args()

    print(f"1. accumulator, one tool call in N fragments, min of {args.runs} (target ≤ 3×)")
    for fragments in (2_000, 8_000, 32_000):
        chunks = tool_call_chunks(fragments)
        assert bare_loop(chunks) == crow_accumulator(chunks)
        bare, crow = best_pair(args.runs, chunks)
        ratio = crow / bare
        print(f"  {fragments:>6} fragments  bare {bare * 1e3:7.2f} ms  crow {crow * 1e3:7.2f} ms  "
              f"{ratio:5.2f}×  ({'met' if ratio <= 3 else 'MISSED'})")

    _Stream.big, _Stream.one = text_stream(args.chunks), text_stream(1)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Stream)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    root = f"http://127.0.0.1:{httpd.server_address[1]}"
    clients: dict[str, list[str]] = {}
    for size, path in ((args.chunks, "/big/v1"), (1, "/one/v1")):
        clients[f"httpx + json, {size}"] = [sys.executable, "-c", HTTPX_JSON, root + path]
        clients[f"crow run, {size}"] = [CROW, "run", "--base-url", root + path, "--api-key", "sk-test", "--model",
                                        "m", "hi"]
    try:
        with tempfile.TemporaryDirectory() as home:
            env = isolated_env(home)
            for argv in clients.values():  # warm-up, not counted (bytecode, file cache)
                child_cpu(argv, env, home)
            cpu: dict[str, list[float]] = {name: [] for name in clients}
            for _ in range(args.runs):
                for name, argv in clients.items():  # interleaved: a busy moment hits all alike
                    cpu[name].append(child_cpu(argv, env, home))
    finally:
        httpd.shutdown()
        httpd.server_close()
    best = {name: min(times) for name, times in cpu.items()}
    print(f"2. a {args.chunks}-chunk stream, process CPU (user + sys), min of {args.runs}, interleaved "
          "(target ≤ 2.5×)")
    for name, seconds in best.items():
        print(f"  {name:<26} {seconds:6.3f} s")
    floor, crow = best[f"httpx + json, {args.chunks}"], best[f"crow run, {args.chunks}"]
    ratio = crow / floor
    print(f"  crow / floor               {ratio:6.2f}×   ({'met' if ratio <= 2.5 else 'MISSED'})")
    per_floor = floor - best["httpx + json, 1"]
    per_crow = crow - best["crow run, 1"]
    if per_floor > 0:
        print(f"  per chunk (the {args.chunks}-chunk run less the one-chunk run): floor "
              f"{per_floor / args.chunks * 1e6:.1f} µs, crow {per_crow / args.chunks * 1e6:.1f} µs, "
              f"{per_crow / per_floor:.2f}×")

if __name__ == "__main__":
    main()
