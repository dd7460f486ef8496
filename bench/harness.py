"""What the CPU benchmarks share: a tiny local Chat Completions server and a child process's CPU time.

It runs in a thread of the benchmark's own process, so its CPU is never counted in a child's.
The path before `/chat/completions` says what it answers:

    /ok/v1          streams "ok" (one content chunk, finish_reason stop, usage, [DONE])
    /rounds/N/v1    streams one `list_directory` tool call while the request holds fewer than N tool
                    results, then "done": a run of N tool rounds (N + 1 requests)

Each answer is sent whole with its Content-Length over a kept-alive HTTP/1.1 connection.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["WireServer", "child_cpu", "isolated_env"]

_TOOL_RESULT = re.compile(rb'"role"\s*:\s*"tool"')


def _sse(*chunks: dict[str, Any]) -> bytes:
    frames = [f"data: {json.dumps({'id': 'c', 'object': 'chat.completion.chunk', 'created': 0, 'model': 'm', **c})}"
              for c in chunks]
    return ("\n\n".join([*frames, "data: [DONE]"]) + "\n\n").encode()


def _text(text: str) -> bytes:
    return _sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}})


def _tool_call(number: int) -> bytes:
    call = {"index": 0, "id": f"call_{number}", "type": "function",
            "function": {"name": "list_directory", "arguments": '{"path": "."}'}}
    return _sse({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]},
                              "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        parts = self.path.split("/")
        if len(parts) > 2 and parts[1] == "rounds":
            done = len(_TOOL_RESULT.findall(body))
            answer = _tool_call(done + 1) if done < int(parts[2]) else _text("done")
        else:
            answer = _text("ok")
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


class WireServer:
    """`with WireServer() as server:` serves on 127.0.0.1 (a free port); `server.url(path)` is a base URL."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def __enter__(self) -> WireServer:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def isolated_env(home: str) -> dict[str, str]:
    """The environment for a measured child: config, data and state under `home`, no crow or OpenAI settings,
    and bytecode written and read as an installed package has it (the first, discarded, run writes it)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CROW_", "OPENAI_")) and k != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc kept
    env.update(HOME=home, XDG_CONFIG_HOME=f"{home}/config", XDG_DATA_HOME=f"{home}/data",
               XDG_STATE_HOME=f"{home}/state", XDG_CACHE_HOME=f"{home}/cache", NO_COLOR="1", TERM="dumb")
    return env


def child_cpu(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """User + system CPU seconds of one run of `argv` (and of anything it waited for).

    Raises:
        RuntimeError: the command failed (its stderr's end says why).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {proc.stderr[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
