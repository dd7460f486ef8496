"""`crow acp`'s entry: the tools, MCP servers and model client of the run, served to one editor."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import cast

import acp

from ...config import Settings
from ...driver import editor_interrupts
from ...sessions import SessionStore
from ...stdout import private_stdout
from ...tools.mcp import end_task
from ..options import SurfaceOptions
from ..runtime import Runtime
from ..stdio import log_handler
from .agent import CrowAgent
from .convert import for_editor
from .transport import STDIN_LIMIT, ProtocolOutput, objects_only, streams

__all__ = ["serve_acp", "serve_streams"]

log = logging.getLogger("crow.acp")


def _one_line(record: logging.LogRecord) -> bool:
    """Without --debug a log record is one line: an exception (the SDK logs an unknown notification's
    with its traceback) is reduced to its message."""
    if record.exc_info and record.exc_info[1] is not None:
        text = f"{record.getMessage()}: {record.exc_info[1]}"
        record.msg, record.args, record.exc_info, record.exc_text = " ".join(text.split()), (), None, None
    return True


async def serve_acp(settings: Settings, options: SurfaceOptions) -> int:
    """Serve one editor on stdin/stdout until it closes stdin; returns the exit code (0).

    Raises:
        ConfigError: stdin/stdout are not pipes, an MCP table is invalid.
        SessionError: the session store cannot be opened.
        OSError: the protocol could not be written (a closed stdout, a full disk, the editor gone: EPIPE),
            once the sessions are stored.
    """
    with private_stdout() as protocol:  # stdout is the protocol's alone: whatever else prints goes to stderr
        return await _serve(settings, options, protocol.fileno())


async def _serve(settings: Settings, options: SurfaceOptions, protocol_fd: int) -> int:
    handler = log_handler()  # `crow: warning: …`, as run and chat say it
    if not options.debug:
        handler.addFilter(_one_line)
    logging.basicConfig(level=logging.DEBUG if options.debug else logging.WARNING, handlers=[handler])
    stdin, writer, output = await streams(protocol_fd)  # before anything slow: a terminal is refused at once
    handler.addFilter(lambda _record: not output.gone)  # the SDK's errors about it: the cause is said once
    return await serve_streams(settings, options, stdin, writer, output)


async def serve_streams(settings: Settings, options: SurfaceOptions, stdin: asyncio.StreamReader,
                        writer: asyncio.StreamWriter, output: ProtocolOutput | None = None) -> int:
    """Serve one editor until `stdin` ends: its JSON-RPC lines are read from `stdin`, crow's written to
    `writer` (`crow acp` passes its pipes; an editor in the same process, as in the tests, any stream pair).
    SIGTERM, SIGHUP and SIGINT end the connection as the end of `stdin` does. `writer` stays the caller's to close.

    Args:
        output: `writer`'s protocol when it is crow acp's stdout (`transport.streams`): a write that failed
            is then raised once the sessions are stored.

    Returns:
        The exit code: 0, or the signal's (128 + N) when one ended the connection.

    Raises:
        ConfigError: a rule names no tool, an MCP table is invalid.
        SessionError: the session store cannot be opened.
        OSError: `output` could not be written (a closed stdout, a full disk, the editor gone: EPIPE).
    """
    lost: OSError | None = None
    # each session puts its own folder's AGENTS.md files into its system prompt (`CrowAgent`), none is the runtime's
    runtime = Runtime(settings, replace(options, project_instructions=False))
    store = SessionStore()
    async with runtime:  # MCP servers stopped, the client closed
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=STDIN_LIMIT)
        agent = CrowAgent(settings, options, store, runtime)

        async def start() -> None:
            # the configured MCP servers start while the editor's `initialize` is answered; session
            # requests wait for them (`CrowAgent.ready`)
            for problem in await runtime.start():
                log.warning("%s", for_editor(problem))

        agent.starting = starting = loop.create_task(start(), name="acp-start")
        objects = loop.create_task(objects_only(stdin, reader, writer, agent), name="acp-stdin")
        # a failed start (a rule naming no tool: ConfigError) ends the connection, exit 2 as crow run
        starting.add_done_callback(lambda task: task.cancelled() or task.exception() is None or objects.cancel())
        # a signal ends the connection as the end of stdin does: prompts stop, then the connection closes
        with editor_interrupts() as interrupts, interrupts.stopping(lambda _signum: objects.cancel()):
            try:
                await acp.run_agent(cast(acp.Agent, agent), writer, reader)  # the methods crow serves
            except ConnectionError:  # the SDK's writer, once the output is gone
                if output is None or not output.gone:
                    raise
                lost = output.failure()
            finally:
                objects.cancel()
                # until the start task is done (its outcome is read below): a cancellation left pending on this
                # task (the SDK's task group, as the connection ends) must not end the wait early, and one the
                # start absorbed is made again
                await end_task(starting)
                await agent.close()
        if not starting.cancelled() and (failure := starting.exception()) is not None:
            raise failure
    if lost is not None:  # `cli.main` says it as for every command: cannot write the output (exit 1)
        raise lost
    return interrupts.exit_code
