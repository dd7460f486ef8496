"""Garbage collection around start-up: off while crow loads, then on, skipping what loading made."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.replay_server import ReplayServer
from tests.support import text_sse

# crow's main in a fresh interpreter; what the collector was doing when `import openai` began and at the end
WATCHED = """
import gc, json, sys

seen = {}

class _Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "openai" and "at_sdk_import" not in seen:
            seen["at_sdk_import"] = gc.isenabled()
        return None

sys.meta_path.insert(0, _Watch())
out, sys.argv = sys.argv[1], ["crow", *sys.argv[2:]]
try:
    from crow_cli.cli import main
    main()
finally:
    seen.update(at_exit=gc.isenabled(), frozen=gc.get_freeze_count())
    open(out, "w").write(json.dumps(seen))
"""


# the garbage collector does not walk the SDK's objects again and again while they are created (about a
# fifth of a one-shot run's CPU), nor once more at exit
def test_a_run_loads_without_collecting_then_collects_skipping_what_it_loaded(tmp_path):
    out = tmp_path / "gc.json"
    with ReplayServer([{"sse": text_sse("ok")}]) as server:
        proc = subprocess.run([sys.executable, "-c", WATCHED, str(out), "run", "--base-url", server.base_url,
                               "--api-key", "sk-test", "--model", "m", "hi"], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    seen = json.loads(out.read_text())
    assert seen["at_sdk_import"] is False
    assert seen["at_exit"] is True and seen["frozen"] > 10_000


ONCE = """
import gc
from crow_cli import startup
startup.loading()
assert not gc.isenabled()
startup.loaded()
frozen = gc.get_freeze_count()
kept = [[n] for n in range(1000)]  # alive at a second `loaded()`: not frozen by it
startup.loaded()
startup.loading()  # start-up is over: collection stays on
print(gc.isenabled(), gc.get_freeze_count() == frozen > 0)
"""


def test_only_the_first_loaded_freezes_and_collection_stays_on():
    # a second client (chat's /model) must not freeze the conversation's objects for good
    proc = subprocess.run([sys.executable, "-c", ONCE], capture_output=True, text=True, timeout=60)
    assert proc.stdout == "True True\n", proc.stderr
