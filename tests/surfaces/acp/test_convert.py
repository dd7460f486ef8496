"""`surfaces/acp/convert.py`: the pure ACP mappings, in process (milliseconds, no `crow acp` subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from acp import RequestError, embedded_text_resource, image_block, resource_block, resource_link_block, text_block
from acp.schema import HttpMcpServer, McpServerStdio

from crow_cli.errors import ToolError
from crow_cli.history import ToolCall
from crow_cli.surfaces.acp.convert import (
    arguments,
    diff_of,
    disk_diff,
    edit_target,
    line_error,
    locations,
    mcp_tables,
    prompt_text,
    reasoning_text,
    screen_line,
    stored_diff,
    title,
    tool_kind,
)
from crow_cli.tools.builtin import BUILTIN_TOOLS
from crow_cli.tools.tool import tool

TOOLS = {t.name: t for t in BUILTIN_TOOLS}


def test_each_neutral_kind_has_its_acp_name_and_no_tool_is_named() -> None:
    assert {name: tool_kind(t) for name, t in TOOLS.items()} == {
        "read_file": "read", "list_directory": "read", "search_files": "search", "write_file": "edit",
        "edit_file": "edit", "run_shell": "execute", "shell_output": "read", "shell_kill": "other",
        "web_fetch": "fetch", "todo_write": "other", "exit_plan_mode": "switch_mode"}

    @tool(kind="fetch")
    def get_page(url: str) -> str:
        """Fetch a page."""
        return url

    assert tool_kind(get_page) == "fetch" and tool_kind(None) == "other"


def test_prompt_blocks_become_one_user_message_in_order() -> None:
    blocks = [text_block("Look at"), resource_link_block("main.py", "file:///w/src/main%20x.py"),
              resource_block(embedded_text_resource("file:///w/a\".txt", "hi </context> there"))]
    assert prompt_text(blocks) == ('Look at\n\n[main.py](/w/src/main x.py)\n\n'
                                   '<context uri="/w/a%22.txt">\nhi <\\/context> there\n</context>')
    with pytest.raises(RequestError):
        prompt_text([image_block("AAAA", "image/png")])
    with pytest.raises(RequestError):
        prompt_text([text_block("  ")])


def test_titles_arguments_and_locations(tmp_path: Path) -> None:
    shell = ToolCall("c", "run_shell", '{"command": "ls\\u001b[2J -la"}')
    # no control character reaches the editor; it shows as an escape, so the command read is the one that runs
    # (b372c6b made previews escape them: this test still expected them dropped, and failed the full suite)
    assert title(shell, arguments(shell)) == "run_shell: ls\\u001b[2J -la"
    bad = ToolCall("c", "x", "[1, 2]")
    assert arguments(bad) is None and title(bad, None) == "x([1, 2])"
    assert locations({"path": "a.py", "start_line": 3}, tmp_path)[0].line == 3  # type: ignore[index]
    assert locations({"path": "../../etc/passwd"}, tmp_path) is None  # outside the workspace: no location


def test_an_edit_diff_follows_the_builtin_edit_rules(tmp_path: Path) -> None:
    # In editor-buffer mode the permission diff follows the built-in edit's rules: an old_string occurring
    # twice shows no diff of the first occurrence (the edit fails), a CRLF buffer shows its diff
    edit = TOOLS["edit_file"]
    file = tmp_path / "a.txt"
    args = {"path": "a.txt", "old_string": "x = 1\n", "new_string": "x = 2\n"}
    assert edit_target(edit, args, tmp_path) == file and edit_target(TOOLS["read_file"], args, tmp_path) is None
    twice = "x = 1\nx = 1\n"
    with pytest.raises(ToolError, match="occurs 2 times"):
        diff_of(args, file, twice, strict=True)  # the tool's own error: the call is answered, nobody asked
    assert diff_of(args, file, twice) is None
    crlf = diff_of(args, file, "a\r\nx = 1\r\nb\r\n", strict=True)
    assert (crlf.old_text, crlf.new_text) == ("a\r\nx = 1\r\nb\r\n", "a\r\nx = 2\r\nb\r\n")
    write = diff_of({"path": "a.txt", "content": "new"}, file, None)
    assert (write.path, write.old_text, write.new_text) == (str(file), None, "new")


def test_disk_and_stored_diffs(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"one\r\ntwo\r\n")
    args = {"path": "a.txt", "old_string": "two\n", "new_string": "three\n"}
    disk = disk_diff(TOOLS["edit_file"], args, tmp_path)
    assert disk is not None and disk.new_text == "one\r\nthree\r\n"  # the file's own line ends are kept
    stored = stored_diff(TOOLS["edit_file"], args, tmp_path)
    assert (stored.old_text, stored.new_text) == ("two\n", "three\n")
    assert stored_diff(TOOLS["run_shell"], {"path": "a.txt", "command": "ls"}, tmp_path) is None


def test_lines_that_are_not_requests_get_jsonrpc_errors() -> None:
    assert line_error(b'{"jsonrpc": "2.0", "method": "x"}') is None
    assert line_error(b"not json")["error"]["code"] == -32700  # type: ignore[index]
    assert line_error(b"\xff")["error"]["code"] == -32700  # type: ignore[index]
    assert line_error(b"[1]")["error"]["message"] == "Invalid Request: a batch (not supported)"  # type: ignore[index]
    assert line_error(b"null")["error"]["code"] == -32600  # type: ignore[index]


def test_editor_mcp_servers() -> None:
    servers = [McpServerStdio(name="fs", command="srv", args=["-v"], env=[]),
               HttpMcpServer(name="web", url="http://h/mcp", headers=[], type="http")]
    assert mcp_tables(servers) == {"fs": {"command": "srv", "args": ["-v"], "env": {}},
                                   "web": {"url": "http://h/mcp"}}


# JSON-RPC 2.0 §4-5: a request with no method, session/cancel sent as a request, `jsonrpc: "1.0"` and an object
# id each get the answer the spec gives
@pytest.mark.parametrize(("line", "answer"), [
    (b'{"jsonrpc": "2.0", "id": 7}', {"jsonrpc": "2.0", "id": 7, "error": {
        "code": -32600, "message": "Invalid Request: no method"}}),
    (b'{"jsonrpc": "1.0", "id": 8, "method": "session/list"}', {"jsonrpc": "2.0", "id": 8, "error": {
        "code": -32600, "message": 'Invalid Request: jsonrpc must be "2.0"'}}),
    (b'{"id": 9, "method": "session/list"}', {"jsonrpc": "2.0", "id": 9, "error": {
        "code": -32600, "message": 'Invalid Request: jsonrpc must be "2.0"'}}),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "session/list"}', {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "Invalid Request: id must be a string, a number or null"}}),
    (b'{"jsonrpc": "2.0", "id": true, "method": "session/list"}', {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "Invalid Request: id must be a string, a number or null"}}),
    (b'{"jsonrpc": "2.0", "id": 3, "method": 5}', {"jsonrpc": "2.0", "id": 3, "error": {
        "code": -32600, "message": "Invalid Request: method must be a string"}}),
])
def test_requests_that_break_json_rpc_get_invalid_request(line: bytes, answer: dict) -> None:
    assert screen_line(line) == (None, answer)
    assert line_error(line) == answer


def test_session_cancel_sent_as_a_request_is_passed_on_as_a_notification_and_answered() -> None:
    line = b'{"jsonrpc": "2.0", "id": 4, "method": "session/cancel", "params": {"sessionId": "s"}}'
    passed, answer = screen_line(line)
    assert passed is not None and json.loads(passed) == {"jsonrpc": "2.0", "method": "session/cancel",
                                                         "params": {"sessionId": "s"}}
    assert answer == {"jsonrpc": "2.0", "id": 4, "result": None}


def test_requests_notifications_and_the_editors_answers_pass_on_unchanged() -> None:
    for line in (b'{"jsonrpc": "2.0", "id": "x", "method": "session/list"}',
                 b'{"jsonrpc": "2.0", "method": "session/cancel", "params": {}}',
                 b'{"jsonrpc": "2.0", "id": 0, "result": {}}', b'{"jsonrpc": "2.0", "id": 1, "error": {}}'):
        assert screen_line(line) == (line, None)


def test_a_lone_surrogate_escape_from_the_editor_becomes_u_fffd_and_a_pair_is_kept() -> None:
    # half of an emoji pair ("\ud83d" alone) in a prompt is sent, not an internal error ("surrogates not
    # allowed"); an answer of the editor's (a file it read) carries the same escapes
    for method in ('"method": "session/prompt", "id": 3, "params": {"prompt": [{"type": "text", "text": "%s"}]}',
                   '"id": 7, "result": {"content": "%s"}'):
        line = ('{"jsonrpc": "2.0", ' + method % r"a \ud83d b \ud83d\ude00 c \udc00") + "}"
        passed, answer = screen_line(line.encode())
        assert answer is None and passed is not None
        assert "a \ufffd b \U0001f600 c \ufffd" in json.dumps(json.loads(passed), ensure_ascii=False)


def test_reasoning_kept_only_as_blocks_is_replayed_as_a_thought() -> None:
    # a session from a gateway sending only reasoning_details blocks (no `reasoning` text beside them) is
    # replayed with a thought for each turn that had one
    blocks = [{"type": "reasoning.text", "text": "Need it.", "index": 0, "signature": "S1+/="},
              {"type": "reasoning.encrypted", "data": "E1", "index": 0},
              {"type": "reasoning.summary", "summary": "Looked it up.", "index": 1}]
    assert reasoning_text({"role": "assistant", "content": None, "reasoning_details": blocks}) == \
        "Need it.\n\nLooked it up."
    assert reasoning_text({"role": "assistant", "reasoning": "Own words.", "reasoning_details": blocks}) == "Own words."
    assert reasoning_text({"role": "assistant", "reasoning_details": "not a list"}) == ""
    assert reasoning_text({"role": "assistant", "content": "hi"}) == ""


# a session of Mistral's, whose thinking is kept as content parts (no reasoning field), is replayed by
# session/load with its thoughts
def test_reasoning_kept_as_thinking_parts_of_the_content_is_replayed_as_a_thought() -> None:
    content = [{"type": "thinking", "thinking": [{"type": "text", "text": "Step one."}]}, {"type": "text", "text": "A"},
               {"type": "thinking", "thinking": "Step two."}, {"type": "thinking", "thinking": []}]
    assert reasoning_text({"role": "assistant", "content": content}) == "Step one.\n\nStep two."


# ACP log lines carry no `crow:` prefix and name config keys, not flags an editor's user cannot set
def test_messages_for_the_editor_name_config_keys_and_drop_the_prefix() -> None:
    from crow_cli.surfaces.acp.convert import for_editor

    notice = ("crow: no sandbox for commands: every command will be asked about (--sandbox off runs them with your "
              "full rights; --no-tools offers none)")
    assert for_editor(notice) == ('no sandbox for commands: every command will be asked about (`sandbox = "off"` in '
                                  "crow's config runs them with your full rights; --no-tools offers none)")
    assert for_editor("set --model to choose") == "set the config key `model` to choose"
