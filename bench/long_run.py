"""How a long run's CPU grows: `crow run` beside an httpx + json loop sending the same growing history.

A local server (`harness.WireServer`) answers every request with one `list_directory` tool call
until the request holds N tool results, then with "done": a run of N tool rounds. Each client runs
it in a fresh process, for N = 100 and N = 400 (interleaved, best of `--runs`):

    httpx + json   a loop that appends the assistant tool call and a listing of the folder as the
                   tool result, and posts the whole history again (the wire's own cost)
    crow run       `crow run --max-turns 1000 --base-url … --model m "list the folder"` (defaults otherwise)

The number that matters is the growth, (CPU at 400 − CPU at 100), of crow over the loop's (the target
is at most 3): the work crow does per round beyond the wire's must not grow with the history.

    .venv/bin/python bench/long_run.py [--runs 3] [--rounds 100 400]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness import WireServer, child_cpu, isolated_env

CROW = str(Path(sys.executable).with_name("crow"))

HTTPX_LOOP = """
import json, os, sys
import httpx
history = [{"role": "user", "content": "list the folder"}]
tools = [{"type": "function", "function": {"name": "list_directory", "description": "List a folder.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
with httpx.Client(headers={"authorization": "Bearer sk-test"}) as http:
    while True:
        body = {"model": "m", "messages": history, "tools": tools, "stream": True}
        calls, text = {}, []
        with http.stream("POST", sys.argv[1] + "/chat/completions", content=json.dumps(body),
                         headers={"content-type": "application/json"}) as response:
            for line in response.iter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                for choice in chunk["choices"]:
                    delta = choice["delta"]
                    text.append(delta.get("content") or "")
                    for call in delta.get("tool_calls") or []:
                        calls.setdefault(call["index"], call)
        if not calls:
            break
        listed = [{"type": "function", "id": c["id"], "function": c["function"]} for c in calls.values()]
        history.append({"role": "assistant", "content": None, "tool_calls": listed})
        for call in listed:
            history.append({"role": "tool", "tool_call_id": call["id"], "content": "\\n".join(sorted(os.listdir(".")))})
print("".join(text))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, nargs=2, default=[100, 400], metavar=("LOW", "HIGH"))
    args = parser.parse_args()
    low, high = args.rounds
    with WireServer() as server, tempfile.TemporaryDirectory() as home:
        env = isolated_env(home)
        for name in ("notes.txt", "main.py", "README.md"):  # something for list_directory to list
            (Path(home) / name).write_text("x\n")

        def argv(client: str, rounds: int) -> list[str]:
            url = server.url(f"/rounds/{rounds}/v1")
            if client == "httpx + json loop":
                return [sys.executable, "-c", HTTPX_LOOP, url]
            return [CROW, "run", "--max-turns", "1000", "--base-url", url, "--api-key", "sk-test", "--model", "m",
                    "list the folder"]

        clients = ("httpx + json loop", "crow run")
        child_cpu(argv("crow run", 2), env, home)  # warm-up, not counted: writes bytecode
        cpu: dict[tuple[str, int], list[float]] = {(c, n): [] for c in clients for n in (low, high)}
        for _ in range(args.runs):
            for key in cpu:  # interleaved
                cpu[key].append(child_cpu(argv(*key), env, home))
    best = {key: min(times) for key, times in cpu.items()}
    print(f"long-run CPU (user + sys), best of {args.runs}, interleaved")
    print(f"  {'client':<20} {f'{low} rounds':>11} {f'{high} rounds':>11} {'growth':>9}")
    growth = {}
    for client in clients:
        growth[client] = best[(client, high)] - best[(client, low)]
        print(f"  {client:<20} {best[(client, low)]:9.2f} s {best[(client, high)]:9.2f} s {growth[client]:7.2f} s")
    ratio = growth["crow run"] / growth["httpx + json loop"]
    print(f"  crow growth / loop growth  {ratio:5.2f}×   (target ≤ 3: {'met' if ratio <= 3 else 'MISSED'})")


if __name__ == "__main__":
    main()
