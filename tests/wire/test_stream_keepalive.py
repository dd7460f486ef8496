"""After `data: [DONE]` the rest of the body is read, so the connection goes back to the pool (keep-alive)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tests.replay_server import ReplayServer
from tests.support import crow, raw_http_server, run_args, script, text_sse


# noticed at the end of wave 3: every request opened a new connection: the stream stopped at `data: [DONE]`
# before the body's end, so the connection was closed instead of going back to the pool
def test_a_tool_turn_and_its_answer_share_one_connection(tmp_path: Path) -> None:
    with ReplayServer(script([("l1", "list_directory", {})], final="Done.")) as server:
        peers: list[Any] = []
        accept = server.httpd.process_request  # socketserver's public hook, once per accepted connection

        def counting(request: Any, client_address: Any) -> None:
            peers.append(client_address)
            accept(request, client_address)

        server.httpd.process_request = counting  # type: ignore[method-assign]
        proc = crow(*run_args(server, "--yes", "go"), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "Done.\n"), proc.stderr
    assert len(server.requests) == 2 and len(peers) == 1, peers


def test_a_body_held_open_after_done_does_not_hold_up_the_turn(tmp_path: Path) -> None:
    released = threading.Event()

    def done_then_hold(handler: Any) -> None:  # the terminating chunk comes only once crow has finished
        handler.protocol_version = "HTTP/1.1"
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        data = text_sse("Hi there.").encode()
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        handler.wfile.flush()
        released.wait(120)
        handler.wfile.write(b"0\r\n\r\n")

    with raw_http_server(done_then_hold) as base_url:
        try:
            proc = crow("run", "--base-url", base_url, "--api-key", "sk-test", "--model", "m", "--no-tools", "hi",
                        cwd=tmp_path)
        finally:
            released.set()
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "Hi there.\n", "")


# A body kept open after [DONE] added up to 0.5 s to every turn: once one was still open after the
# grace, later turns of the same client close it at once (and a server that ends its bodies keeps the reuse) (issue 32)
async def test_a_body_left_open_after_done_is_closed_at_once_on_later_turns() -> None:
    import asyncio

    from crow_cli.wire.stream import AfterDone, iter_chunks

    read_after_done: list[bool] = []

    async def held_open():  # type: ignore[no-untyped-def]
        yield text_sse("Hi.").encode()  # ends with data: [DONE]
        read_after_done.append(True)
        await asyncio.Event().wait()  # the body never ends

    after = AfterDone(grace_s=0.01)
    assert [c async for c in iter_chunks(held_open(), "text/event-stream", after)]
    assert read_after_done == [True] and after.grace_s == 0  # it waited once, and learned
    read_after_done.clear()
    assert [c async for c in iter_chunks(held_open(), "text/event-stream", after)]
    assert read_after_done == []  # closed at once: the rest of the body was never asked for
