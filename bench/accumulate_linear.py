"""Accumulator cost per byte stays flat as arguments grow (linear, not quadratic).

Feeds N bytes of tool-call arguments in 1-byte fragments for N = 64 KB … 1 MB, side by side in one
run, and prints µs per KB and the ratio to the smallest size. A quadratic accumulator shows ratios
growing with N (16× at 1 MB); a linear one stays near 1.

    .venv/bin/python bench/accumulate_linear.py
    .venv/bin/python bench/accumulate_linear.py --sizes 4 16   # a second's check (.ci/run)
"""

from __future__ import annotations

import argparse
import json
import time

from crow_cli.wire.accumulate import StreamAccumulator


def feed(n_bytes: int) -> float:
    payload = json.dumps({"blob": "x" * (n_bytes - 12)})
    deltas = [{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ch}}]}}]}
              for ch in payload]
    acc = StreamAccumulator()
    acc.feed({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]}}]})
    start = time.perf_counter()
    for d in deltas:
        acc.feed(d)
    turn, _ = acc.finish()
    elapsed = time.perf_counter() - start
    assert turn.tool_calls[0].arguments == payload
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024], metavar="KB",
                        help="argument sizes in KB, the first the base of the ratios (default: 64 256 1024)")
    sizes = [kb * 1024 for kb in parser.parse_args().sizes]
    per_kb = {}
    for n in sizes:
        per_kb[n] = min(feed(n) for _ in range(3)) / (n / 1024) * 1e6
    base = per_kb[sizes[0]]
    print(f"{'arguments':>10}  {'µs per KB':>10}  {f'ratio to {sizes[0] // 1024} KB':>14}")
    for n in sizes:
        print(f"{n // 1024:>8} KB  {per_kb[n]:>10.1f}  {per_kb[n] / base:>14.2f}")


if __name__ == "__main__":
    main()
