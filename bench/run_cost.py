"""One-shot CPU of `crow run` beside a bare openai-SDK loop and the httpx + json floor.

Each client sends one turn to a local server that streams "ok" (`harness.WireServer`) in a fresh
process; the CPU of that process (user + sys, from getrusage) is the cost: start-up, imports, the
request, the stream. The three run interleaved, 7 times each, and the minimum of each is printed,
with crow's ratio to the bare SDK loop (the target is at most 0.8).

    bare openai   `openai.OpenAI().chat.completions.create(stream=True)`, printing each delta
    httpx + json  `httpx.stream("POST", …)` and `json.loads` of every `data:` line (the floor)
    crow run      `crow run --base-url … --model m hi` with its defaults (tools offered, session stored)

    .venv/bin/python bench/run_cost.py [--runs 7]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness import WireServer, child_cpu, isolated_env

CROW = str(Path(sys.executable).with_name("crow"))

BARE_OPENAI = """
import sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="sk-test")
for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        print(chunk.choices[0].delta.content, end="", flush=True)
print()
"""

HTTPX_JSON = """
import json, sys
import httpx
body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
with httpx.stream("POST", sys.argv[1] + "/chat/completions", json=body,
                  headers={"authorization": "Bearer sk-test"}) as response:
    for line in response.iter_lines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            chunk = json.loads(line[5:])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                print(chunk["choices"][0]["delta"]["content"], end="", flush=True)
print()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    with WireServer() as server, tempfile.TemporaryDirectory() as home:
        url = server.url("/ok/v1")
        env = isolated_env(home)
        clients = {
            "httpx + json (floor)": [sys.executable, "-c", HTTPX_JSON, url],
            "bare openai loop": [sys.executable, "-c", BARE_OPENAI, url],
            "crow run": [CROW, "run", "--base-url", url, "--api-key", "sk-test", "--model", "m", "hi"],
        }
        for argv in clients.values():  # warm-up, not counted: writes bytecode, fills the OS's file cache
            child_cpu(argv, env, home)
        cpu: dict[str, list[float]] = {name: [] for name in clients}
        for _ in range(runs):
            for name, argv in clients.items():  # interleaved: a busy moment hits all three alike
                cpu[name].append(child_cpu(argv, env, home))
    best = {name: min(times) for name, times in cpu.items()}
    print(f"one-shot CPU (user + sys), min of {runs}, interleaved")
    for name, seconds in best.items():
        print(f"  {name:<22} {seconds:6.3f} s")
    ratio = best["crow run"] / best["bare openai loop"]
    print(f"  crow / bare openai     {ratio:6.2f}×   (target ≤ 0.80: {'met' if ratio <= 0.8 else 'MISSED'})")


if __name__ == "__main__":
    main()
