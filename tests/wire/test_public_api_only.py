"""The wire layer uses its dependencies' public APIs only (issue 9): no private member of the openai SDK."""

from __future__ import annotations

import re
from pathlib import Path

WIRE = Path(__file__).resolve().parents[2] / "crow_cli"
# The five private members crow used before issue 9, and any `_name` reached on an SDK object.
PRIVATE = re.compile(r"_sleep_for_retry|_calculate_retry_timeout|_iter_events|\b_iterator\b|_enforce_credentials|"
                     r"openai\._|from openai\._")


def test_no_private_sdk_member_anywhere_in_the_package():
    hits = [f"{path.relative_to(WIRE.parent)}:{n}: {line.strip()}" for path in sorted(WIRE.rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if PRIVATE.search(line)]
    assert hits == []
