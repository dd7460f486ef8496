"""`crow run`'s command: the prompt from its argument and standard input (crow's app in this process,
`crow_here`; tests/test_cli.py pipes into `crow` processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import text_sse
from tests.replay_server import ReplayServer
from tests.support import crow_here, run_args


# found trying it as a new user (wave 3): UTF-16 piped in (with its byte-order mark, as Windows tools write it)
# reached the model as "\ufffd\ufffdc\x00a\x00…", and a UTF-8 mark as U+FEFF; -f and AGENTS.md decode them
@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_piped_text_is_decoded_by_its_byte_order_mark(encoding: str, tmp_path: Path) -> None:
    piped = tmp_path / "piped"
    piped.write_bytes("café\n".encode(encoding))
    with ReplayServer([{"sse": text_sse("ok")}]) as server:
        code = crow_here(*run_args(server, "--no-tools", "--no-session", "--stdin", "Review"), stdin=piped)
    assert code == 0
    assert server.requests[0]["messages"][-1]["content"] == "Review\n\ncafé\n"
