"""`crow_cli.stdout.private_stdout`: while it lasts, only what crow writes to it reaches the real stdout."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import os, sys
from crow_cli.stdout import private_stdout
with private_stdout() as out:
    os.write(1, b"from a plugin\\n")  # descriptor 1 is stderr meanwhile
    print("from print")
    out.write("the answer\\n")
os.write(1, b"after\\n")  # restored
"""


def test_whatever_else_writes_to_descriptor_1_lands_on_stderr() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "the answer\nafter\n"
    assert proc.stderr == "from a plugin\nfrom print\n"
