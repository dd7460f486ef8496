"""One run assembler for every surface: the parts of a run built from `Settings`, in order, with their lifecycles.

    Runtime(settings, options)            tool context → instructions → registry (MCP tables checked)
      async with runtime:                 (MCP servers stopped and the client closed on the way out)
        runtime.begin()                   MCP servers start in the background (while the surface reads its session)
        warnings = await runtime.start()  their tools → schemas and their errors → rule names checked → client
        (chat: start(wait_for_mcp=False), then await runtime.mcp_ready() before its first turn)
        driver = runtime.new_driver(approve, recorder=…, interrupts=…)   approver → compactor → driver
        (acp: each session's driver on its own folder and tools, `context_for(folder)`, `tools=…`)
        await runtime.switch_model("other")      the client and compactor follow; never assigned by a surface
        runtime.use_session(recorder)            the compactor of another session

`crow run`, `crow chat` and `crow acp` build their runs here, and `crow mcp` its calls' tool contexts; a surface
only adds what it shows and how it asks (its sink and its approval question).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from ..agents import find_agents
from ..config import Settings, default_config_path
from ..context.compact import Checkpoint
from ..default_prompt import default_prompt
from ..driver import Driver, Interrupts, run_interrupts
from ..events import RunFinished
from ..modes import SandboxMode
from ..skills import Skills, skills_here
from ..text import strip_controls
from ..tools.approval import check_rule_names
from ..tools.builtin.skill import skill as skill_tool
from ..tools.context import ToolContext, resolve_workspace
from ..tools.dispatch import Approver
from ..tools.jobs import BackgroundShells
from ..tools.mcp import McpServers, end_task
from ..tools.registry import ToolRegistry
from ..tools.sandbox import Sandbox, home_notice, startup_notice
from ..trust import is_trusted
from ..wire.client import ChatClient
from ..wire.profile import tool_probe_words
from .approve import start_mode
from .common import (
    build_client,
    build_compactor,
    build_registry,
    loop_settings,
    warning_to,
    web_access,
    with_instructions,
)
from .hooks import load_hooks
from .options import SurfaceOptions
from .task import Subagents

if TYPE_CHECKING:
    from .persist import SessionRecorder

__all__ = ["Runtime", "assemble_driver", "list_mcp_tools", "no_tool_call_line"]


def no_tool_call_line(client: ChatClient) -> str | None:
    """The line a run with tools starts with when the stored `crow probe --tools` of its server and model found no
    call crow can run (`ServerProfile.runs_no_tool_call`): said once, before the first request, rather than a
    run that fails at its first call; None otherwise."""
    profile = client.profile
    if not profile.runs_no_tool_call() or profile.tool_probe is None:
        return None
    model = " ".join(strip_controls(client.settings.model).split())  # one line, whatever the name holds
    return (f"crow probe --tools found that {model} makes no tool call crow can run "
            f"({tool_probe_words(profile.tool_probe)}): its tools will likely not run; `crow probe --tools` "
            "probes it again")


def assemble_driver(settings: Settings, client: ChatClient, registry: ToolRegistry | None, approve: Approver | None,
                    context: ToolContext, recorder: SessionRecorder | None = None, *, trace: bool = False,
                    interrupts: Interrupts | None = None, checkpoint: Checkpoint | None = None) -> Driver:
    """The last steps of every run's assembly: loop limits, the session's compactor, the driver.

    `Runtime.new_driver` uses it; so does a call of `crow mcp` (`surfaces.mcp_server`), whose model and
    workspace are its own. `recorder`: the session the runs are stored in (its compaction checkpoint,
    new ones stored); without one, the compactor starts from `checkpoint` and stores nothing.
    """
    # a model known to take no images gets the placeholders of the images tools return, not the images
    limits = dataclasses.replace(loop_settings(settings, trace=trace), images=client.takes_images)
    return Driver(client, registry, limits, approve, context,
                  build_compactor(settings, recorder, checkpoint=checkpoint, hooks=context.hooks), interrupts)


class Runtime:
    """The parts of one surface's runs, built in the order every surface needs.

    Constructing it (no I/O but reading AGENTS.md files and importing tool modules) makes the tool
    context (workspace, secrets, sandbox), the settings with their instructions and the registry, and
    checks the MCP server tables; `start` does the slow part. Use it as an async context manager: on
    the way out the model client is closed and the MCP servers are stopped.

    Args:
        settings: the run's settings.
        options: the surface's flags (`yes`: the policy the built-in prompt tells, `approval.start_policy`).
        warn: where a skipped AGENTS.md file is said (default: stderr).

    Raises:
        ConfigError: `--yes` with the `read-only` or `plan` policy, the workspace is not a folder, or an MCP
            server table is invalid.
    """

    def __init__(self, settings: Settings, options: SurfaceOptions,
                 warn: Callable[[str], None] | None = None) -> None:
        self.options = options
        self.start_mode = start_mode(settings, yes=options.yes)
        """The approval policy the surface starts in (`--yes`: yolo), decided here once for every surface: the
        built-in prompt tells it, `crow mcp` holds its calls to it, and no session finds it refused later."""
        self.context = replace(
            ToolContext.for_workspace(settings.workspace, secrets=[settings.api_key, *settings.secrets],
                                      sandbox=Sandbox(settings.sandbox, settings.sandbox_network)),
            web=web_access(settings), background=BackgroundShells(settings.max_background_commands))
        self.warn = warn or warning_to()
        """Where the lines said on the way out go (each command still running in the background, stopped)."""
        # the project's hooks only in a trusted folder
        hooks = load_hooks(settings, self.context.workspace, warn=warn or warning_to())
        if hooks is not None:
            hooks.permission_mode = "bypassPermissions" if options.yes else hooks.permission_mode
            self.context = replace(self.context, hooks=hooks)
        self.registry: ToolRegistry | None = (None if options.no_tools else
                                              build_registry(settings, extra_dirs=options.tools_dirs))
        self.skills = self._find_skills(settings, warn)
        """The run's skills (`crow_cli.skills`): listed in the built-in prompt, loaded by the `skill` tool."""
        self.context = replace(self.context, skills=self.skills or None)
        self.subagents = Subagents(lambda: self.settings, record_dir=options.record_dir, trace=options.debug,
                                   system_for=self.system_for)
        """The built-in `task` tool's subagents (`surfaces.task`); its agents are read by `start`."""
        if self.registry is not None:
            self.registry.register(self.subagents.tool, source="builtin")
        self.base_settings = settings
        """The settings before a workspace's prompt was added (`settings_for` builds another folder's)."""
        default = self._default_prompt(settings, self.context.workspace)
        if default == "" and settings.system_prompt_file:  # it replaces crow's prompt with nothing: said, not silent
            (warn or warning_to())(f"the system prompt file {settings.system_prompt_file!r} is empty: it replaces "
                                   "crow's built-in system prompt with nothing")
        self.settings = with_instructions(settings, self.context.workspace, options.project_instructions, warn=warn,
                                          default=default)
        self._mcp = McpServers({} if self.registry is None else self.settings.mcp_servers,
                               errlog=sys.stderr if options.debug else None, workspace=self.context.workspace)
        self._client: ChatClient | None = None
        self.driver: Driver | None = None
        """The driver `new_driver` made last."""
        self._recorder: SessionRecorder | None = None
        self._exit = AsyncExitStack()
        self._mcp_start: asyncio.Task[None] | None = None
        self._reported = 0  # how many of the registry's errors `start` / `mcp_ready` have returned

    def _find_skills(self, settings: Settings, warn: Callable[[str], None] | None) -> Skills:
        """The skills for this runtime's workspace (a project's only when the person trusts it), each skipped one
        and each note one line to `warn`; with any, the `skill` tool joins the registry. None are looked for without
        tools or without a built-in prompt (or a prompt file) to list them in."""
        if self.registry is None or settings.system == "" or not (settings.default_prompt or
                                                                 settings.system_prompt_file):
            return Skills()
        skills = skills_here(self.context.workspace, default_config_path().parent, secrets=self.context.secrets)
        tell = warn or warning_to()
        for line in (*skills.problems, *skills.notes, *skills.shadowing):
            tell(line)
        if skills:
            self.registry.register(replace(skill_tool), source="builtin")
        return skills

    def settings_for(self, root: Path, project_instructions: bool | None = None) -> Settings:
        """The settings of a session whose workspace is `root` (an editor's session, a `crow mcp` call in
        another folder): crow's built-in prompt naming `root`, then `--system`, then `root`'s AGENTS.md files
        (when `project_instructions`, default the runtime's option). It reads files: call it off the event loop.

        Raises:
            ConfigError: the system prompt file cannot be read.
        """
        enabled = self.options.project_instructions if project_instructions is None else project_instructions
        return with_instructions(self.base_settings, root, enabled,
                                 default=self._default_prompt(self.base_settings, root))

    def _default_prompt(self, settings: Settings, workspace: Path, tools: list[str] | None = None) -> str | None:
        """crow's built-in system prompt for a run in `workspace` (or `system_prompt_file`'s) offering `tools`
        (default: the registry's); None when it is off or `--system ""` asks for no system prompt at all.

        Raises:
            ConfigError: the system prompt file cannot be read.
        """
        if settings.system == "" or not (settings.default_prompt or settings.system_prompt_file):
            return None
        # the policy the run starts in (`--yes`: yolo), not the configured one: the model is told what is true
        return default_prompt(workspace=workspace, sandbox=settings.sandbox,
                              network=settings.sandbox_network, approval=self.start_mode,
                              tools=[t.name for t in self.registry or ()] if tools is None else tools,
                              file=settings.system_prompt_file, skills=self.skills.listing())

    def system_for(self, root: Path, tools: list[str]) -> str | None:
        """The system prompt of a subagent working in `root` with `tools` (`surfaces.task`): crow's built-in
        prompt naming them, `--system`, `root`'s AGENTS.md files (a file skipped is not said again). It reads
        files: call it off the event loop.

        Raises:
            ConfigError: the system prompt file cannot be read.
        """
        return with_instructions(self.base_settings, root, self.options.project_instructions, warn=lambda _: None,
                                 default=self._default_prompt(self.base_settings, root, tools)).system

    @property
    def workspace(self) -> Path:
        return self.context.workspace

    @property
    def in_home(self) -> str | None:
        """The line `start` warns with when the workspace is the home folder or holds it (`crow chat` asks
        then whether to go on), or None."""
        return home_notice(self.context.sandbox, self.context.workspace)

    @property
    def mcp_server_names(self) -> list[str]:
        """The MCP servers `start` starts (none with no tools), by name: what a surface says it waits for."""
        return [c.name for c in self._mcp.configs]

    @property
    def mcp_pending(self) -> list[str]:
        """The MCP servers not yet started and listed (all of them before `begin`), by name."""
        return [c.name for c in self._mcp.configs if c.name not in self._mcp.listed]

    @property
    def client(self) -> ChatClient:
        """The model client (after `start`)."""
        assert self._client is not None, "Runtime.start() first"
        return self._client

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def begin(self) -> None:
        """Start the MCP servers now, in a task of their own (once; none with no tools), so that they start
        while the surface reads its session and loads the SDK. `start` or `mcp_ready` waits for them;
        leaving the runtime stops them, started or not."""
        if self._mcp_start is None and self.registry is not None and self._mcp.configs:
            self._mcp_start = asyncio.create_task(self._start_mcp(self.registry), name="crow-mcp-start")

    async def _start_mcp(self, registry: ToolRegistry) -> None:
        self._exit.push_async_exit(self._mcp)  # stopped on the way out, also when entering is interrupted
        await self._mcp.__aenter__()
        await self._mcp.register_tools(registry)

    async def start(self, *, wait_for_mcp: bool = True) -> list[str]:
        """Start the MCP servers (`begin`) and offer their tools, derive every schema, check the rule names,
        make the client.

        Args:
            wait_for_mcp: wait for the MCP servers here; with False (chat: its prompt is up at once) their
                tools join the registry when `mcp_ready` is awaited, and the rule names are checked then.

        Returns:
            Warnings to show: tools that cannot be described, the sandbox's start-up notice.

        Raises:
            ConfigError: an allow or deny rule names no tool (a typo would never apply), exit 2.
        """
        warnings: list[str] = []
        if self.registry is not None:
            self.subagents.set_agents(find_agents(self.workspace, default_config_path().parent,
                                                  trusted=is_trusted(self.workspace), warn=warnings.append,
                                                  secrets=self.context.secrets))
            self.begin()
            if wait_for_mcp or self._mcp_start is None:
                warnings += await self.mcp_ready()
            else:
                self.registry.schemas()  # the tools known already: one that cannot be described is reported now
                warnings += self._new_errors()
            notice = startup_notice(self.context.sandbox, self.context.workspace)
            warnings += [notice] if notice else []
        self._client = build_client(self.settings, self.options.record_dir, trace=self.options.debug)
        if self.registry is not None and (line := no_tool_call_line(self._client)) is not None:
            warnings.append(line)
        return warnings

    async def mcp_ready(self) -> list[str]:
        """Wait until the MCP servers `begin` started are up and their tools are in the registry (at once when
        there are none), then derive every schema and check the rule names. A cancellation of the caller
        stops the wait, not the servers.

        Returns:
            The registry's problems not returned before (a server that failed to start, a dropped tool …).

        Raises:
            ConfigError: an allow or deny rule names no tool, exit 2.
        """
        if self.registry is None:
            return []
        if self._mcp_start is not None:
            await asyncio.shield(self._mcp_start)
        self.registry.schemas()  # derive every schema now: a tool that cannot be described is reported here
        self.check_rules()
        return self._new_errors()

    def _new_errors(self) -> list[str]:
        assert self.registry is not None
        new, self._reported = self.registry.errors[self._reported:], len(self.registry.errors)
        return new

    def check_rules(self) -> None:
        """Refuse an allow or deny rule that names no tool of the registry as it is now (every tool once `start`
        has run; before it, all but MCP tools).

        Raises:
            ConfigError: the first such rule (a typo would never apply), exit 2.
        """
        if self.registry is not None:  # `skill` is offered only where there are skills: a rule may name it anywhere
            check_rule_names(self.settings.allow, self.settings.deny,
                             [*(t.name for t in self.registry), *self.registry.unusable, skill_tool.name])

    def context_for(self, workspace: Path, *, backup: Callable[[Path, bytes | None, str], None] | None = None,
                    sandbox: SandboxMode | None = None, session_id: str | None = None,
                    background: bool = True) -> ToolContext:
        """This runtime's tool context (its secrets, sandbox, skills, hooks, web access) on another folder: an
        editor session's, a `crow mcp` call's. The runtime is the one builder of a run's tool context.

        Args:
            workspace: the folder the tools are confined to and commands run in.
            backup: keeps the files crow's tools change, for undo (`SessionRecorder.backup`).
            sandbox: the sandbox mode of this context (None: the runtime's); its network stays the runtime's.
            session_id: the session the hooks are told of (None: the runtime's hooks' own).
            background: whether commands may keep running in the background (the runtime's, stopped when it
                ends); False for a `crow mcp` call, which ends with its answer.

        Raises:
            ConfigError: `workspace` is not a folder.
        """
        confined = self.context.sandbox if sandbox is None else replace(self.context.sandbox, mode=sandbox)
        context = ToolContext.for_workspace(workspace, secrets=self.context.secrets, sandbox=confined)
        hooks = None
        if self.context.hooks is not None:
            hooks = self.context.hooks.copy(cwd=context.workspace, **(
                {} if session_id is None else {"session_id": session_id}))
        return replace(context, backup=backup, skills=self.context.skills, hooks=hooks, web=self.context.web,
                       background=self.context.background if background else None)

    def new_driver(self, approve: Approver | None, *, recorder: SessionRecorder | None = None,
                   context: ToolContext | None = None, tools: ToolRegistry | None = None,
                   interrupts: Interrupts | None = None, checkpoint: Checkpoint | None = None) -> Driver:
        """A driver on this runtime's client and tools, its compactor for `recorder`'s session (`use_session`).

        Args:
            approve: the surface's approver (`tools.approval.make_approver` with its question).
            recorder: the session the runs are stored in (None: not stored); its `backup` keeps the files
                crow's tools change, for undo, unless `context` is given.
            context: the tool context (default: this runtime's, with the recorder's backup; an editor
                session's: `context_for`).
            tools: the tools offered (default: this runtime's registry; an editor session's own, which it
                has exactly when the runtime has one).
            interrupts: the surface's signal policy (`driver.run_interrupts` …).
            checkpoint: without a recorder, the compaction checkpoint to start from.
        """
        if context is None:
            context = self.context if recorder is None else replace(self.context, backup=recorder.backup)
        if recorder is not None:  # a subagent's transcript is kept with the session
            context = replace(context, keep_transcript=recorder.keep_transcript)
        self._recorder = recorder
        self.driver = assemble_driver(self.settings, self.client, self.registry if tools is None else tools, approve,
                                      context, recorder, trace=self.options.debug, interrupts=interrupts,
                                      checkpoint=checkpoint)
        return self.driver

    def use_session(self, recorder: SessionRecorder | None, checkpoint: Checkpoint | None = None) -> None:
        """The driver's compactor for `recorder`'s session (its checkpoint, storing new ones); without a
        recorder it starts from `checkpoint` and stores nothing."""
        self._recorder = recorder
        if self.driver is not None:
            self.driver.compactor = build_compactor(self.settings, recorder, checkpoint=checkpoint,
                                                    hooks=self.driver.context.hooks if self.driver.context else None)

    async def switch_model(self, model: str) -> None:
        """Use `model` from the next run on: a new client (the old one closed) and compactor (its window)."""
        self.settings = replace(self.settings, model=model)
        old, self._client = self._client, build_client(self.settings, self.options.record_dir,
                                                      trace=self.options.debug)
        if self.driver is not None:
            self.driver.client = self._client
            self.use_session(self._recorder, self.driver.compactor.checkpoint if self.driver.compactor else None)
        if old is not None:
            await old.aclose()

    async def aclose(self) -> None:
        """Stop the commands still running in the background (one line each, to `warn`), close the client, stop
        the MCP servers (each once; those still starting too) and the hooks still running in the background."""
        try:
            try:
                if self.context.background is not None:
                    for line in await self.context.background.aclose():
                        self.warn(line)
                if self.context.hooks is not None:
                    await self.context.hooks.aclose()
            finally:
                if self._client is not None:
                    await self._client.aclose()
        finally:
            try:
                if self._mcp_start is not None:
                    await end_task(self._mcp_start)
            finally:
                await self._exit.aclose()


async def list_mcp_tools(settings: Settings, registry: ToolRegistry) -> RunFinished | None:
    """Start the configured MCP servers in the workspace (where `crow run` starts them), add their tools to
    `registry`, stop them (`crow tools`). A signal (crow run's policy) stops the servers as leaving does, a
    server that ignores the end of its stdin too; the `RunFinished` returned then says which one came
    (`signal`, `exit_code`: 128 + n); None when none came."""
    workspace = resolve_workspace(settings.workspace)
    with run_interrupts() as scope:
        async with McpServers(settings.mcp_servers, workspace=workspace) as servers:
            await servers.register_tools(registry)
    return scope.finished
