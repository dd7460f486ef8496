"""The size of crow's first request for "hi": the system prompt and the tools, what a small window pays first.

Runs `crow run --record DIR "hi"` in an empty folder (fresh config and state, crow's built-in prompt, the
built-in tools) against a one-answer server of its own on 127.0.0.1, and reads the request as it was sent.
Prints, for the system prompt, the tools (the `tools` array as JSON) and the whole body: characters and
tokens. Tokens are counted with tiktoken (`o200k_base`) when it is installed; otherwise they are estimated as
characters / 4, and the output says which.

    .venv/bin/python bench/first_request.py [--per-tool]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CROW = str(Path(sys.executable).with_name("crow"))
ANSWER = ('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
          '"delta":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')


class _Answer(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = ANSWER.encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def counter() -> tuple[Callable[[str], int], str]:
    """A token counter and how it counts."""
    try:
        import tiktoken
    except ImportError:
        return (lambda text: round(len(text) / 4)), "estimated as characters / 4 (tiktoken is not installed)"
    encoding = tiktoken.get_encoding("o200k_base")
    return (lambda text: len(encoding.encode(text))), "counted with tiktoken o200k_base"


def first_request() -> dict[str, Any]:
    """The JSON body of crow's first request for "hi", as sent."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            work = base / "project"
            work.mkdir()
            env = {k: v for k, v in os.environ.items() if not k.startswith(("CROW_", "OPENAI_"))}
            env.update(HOME=str(base), XDG_CONFIG_HOME=str(base / "config"), XDG_STATE_HOME=str(base / "state"),
                       XDG_DATA_HOME=str(base / "data"), XDG_CACHE_HOME=str(base / "cache"), NO_COLOR="1")
            url = f"http://127.0.0.1:{server.server_address[1]}/v1"
            proc = subprocess.run([CROW, "run", "--base-url", url, "--model", "m", "--record", str(base / "rec"),
                                   "hi"], cwd=work, env=env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=120)
            if proc.returncode != 0:
                sys.exit(f"crow run failed ({proc.returncode}): {proc.stderr.strip()}")
            value: dict[str, Any] = json.loads((base / "rec" / "0001-request.json").read_text())
            return value
    finally:
        server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-tool", action="store_true", help="also each tool's size")
    args = parser.parse_args()
    body = first_request()
    count, how = counter()
    system = "\n".join(m["content"] for m in body["messages"] if m.get("role") == "system"
                       and isinstance(m.get("content"), str))
    tools = json.dumps(body.get("tools") or [], ensure_ascii=False)
    whole = json.dumps(body, ensure_ascii=False)
    print(f'first request of `crow run "hi"`; tokens {how}')
    for name, text in (("system prompt", system), (f"tools ({len(body.get('tools') or [])})", tools),
                       ("whole body", whole)):
        print(f"  {name:<15} {len(text):>7} chars  {count(text):>6} tokens")
    if args.per_tool:
        for tool in body.get("tools") or []:
            text = json.dumps(tool, ensure_ascii=False)
            print(f"    {tool['function']['name']:<20} {len(text):>6} chars  {count(text):>5} tokens")


if __name__ == "__main__":
    main()
