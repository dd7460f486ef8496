"""The tool registry: `Tool`, the `@tool` decorator, and loading from built-ins, entry points and folders.

Schemas come from the function's type hints and its Google-style docstring (`Args:` section), through
pydantic, so a plain typed function is a tool. Duplicate names get a `_2`, `_3` … suffix and every tool
keeps its source (`builtin`, `entry point NAME`, a file path, `mcp:SERVER`), as `crow tools` shows.
A name servers refuse (outside `^[a-zA-Z0-9_-]{1,64}$`) is offered to the model under a unique wire name
(`names.wire_name`), with one warning in `errors`; `get` finds a tool by either name.
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib.util
import inspect
import json
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, get_args, overload

from ..errors import ToolError, ToolFailed
from ..history import ToolDisplay
from ..images import Image
from ..paths import resolve_path
from .context import ToolContext, current_context
from .names import WIRE_NAME, wire_name
from .watchdog import track

__all__ = ["ENTRY_POINT_GROUP", "Preview", "Subject", "Tool", "ToolKind", "ToolOutput", "ToolRegistry",
           "default_registry", "tool"]

ENTRY_POINT_GROUP = "crow_cli.tools"

ToolKind = Literal["read", "write", "search", "shell", "fetch", "other"]
"""What a tool does, in neutral terms each surface maps to its own: `read` (only reads), `write`
(changes files of the workspace), `search` (searches files), `shell` (runs a command line), `fetch`
(fetches from the network), `other`."""
Preview = Callable[[dict[str, Any], ToolContext], str]
"""Text shown before approval, from the validated arguments (the diff of an edit, a command line). It
may raise `ToolError` to answer the call with that error without asking (a pre-check)."""
Subject = Callable[[dict[str, Any]], str | None]
"""The command line that `NAME:PREFIX` approval rules are matched against, from the validated arguments."""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool returned: the text the model reads, what the person is shown of the call
    (`history.ToolDisplay`: a command's output and exit code, an edit's diff), and the images it returned
    (`Image`, shown to the model after the turn's tool results)."""

    text: str
    display: ToolDisplay | None = None
    images: tuple[Image, ...] = ()


@dataclass
class Tool:
    """A callable the model may use, with its JSON schema and scheduling facts."""

    name: str
    description: str
    fn: Callable[..., Any]
    """Sync (run in a worker thread) or async; called with the validated keyword arguments."""
    parameters: dict[str, Any] | None = None
    """JSON Schema (`type: object`) of the keyword arguments; None: derived from `fn` on first use
    (pydantic is slow to import, and `crow tools` needs no schema)."""
    source: str = "builtin"
    needs_approval: bool = False
    """True for tools that change things (write files, run commands): approval decides."""
    parallel: bool = True
    """True when safe to run alongside other calls; False tools run exclusively."""
    timeout_s: float | None = None
    """Per-tool timeout in seconds; None means the loop's default."""
    validator: Any = field(default=None, repr=False)
    """A pydantic model validating the arguments; None (with explicit `parameters`) passes them through."""
    kind: ToolKind = "other"
    """What the tool does (approval's `auto-edit` approves built-in `write` tools; the editor protocol shows it)."""
    preview: Preview | None = field(default=None, repr=False)
    """What an approval question shows; None: the arguments as JSON. See `Preview`."""
    subject: Subject | None = field(default=None, repr=False)
    """The command line `NAME:PREFIX` rules match (a `shell` tool's command); None: only rules naming the tool."""

    def __post_init__(self) -> None:
        if self.kind not in get_args(ToolKind):
            raise ValueError(f"tool {self.name!r}: kind must be one of {', '.join(get_args(ToolKind))}")

    def _derive(self) -> None:
        if self.parameters is None:
            self.parameters, self.validator = _schema_from_function(self.fn, self.name)

    def context_parameter(self) -> str | None:
        """The name of the parameter typed `ToolContext` that dispatch fills in (not in the schema), or None."""
        if self.parameters is not None and self.validator is None:
            return None  # explicit schema (MCP): the function takes the model's arguments only
        return _context_parameter(self.fn)

    def describe(self, arguments: dict[str, Any], context: ToolContext) -> str:
        """The text an approval question shows for `arguments` (raw: not clipped, not filtered).

        Raises:
            ToolError: from the tool's pre-check (the call is answered with it, nobody is asked).
        """
        if self.preview is not None:
            return self.preview(arguments, context)
        return json.dumps(arguments, ensure_ascii=False, default=str)

    def schema(self) -> dict[str, Any]:
        """The request's `tools[]` entry (OpenAI Chat Completions function tool)."""
        self._derive()
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check `arguments` (parsed JSON) against the schema.

        Raises:
            ToolError: not an object, or a field is missing or of the wrong type (message names it).
        """
        if not isinstance(arguments, dict):
            raise ToolError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        self._derive()
        if self.validator is None:
            return arguments
        from pydantic import ValidationError

        try:
            model = self.validator.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from exc
        return {k: getattr(model, k) for k in model.model_fields_set | _required(self.validator)}

    async def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> str:
        """Run the tool with validated arguments and return its output as text (`run`'s text; an image as its
        placeholder).

        A parameter typed `ToolContext` gets `context` (default: the current one), whatever the model sent.
        """
        return (await self.run(arguments, context)).text

    async def run(self, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolOutput:
        """Run the tool with validated arguments: its text for the model, what the person is shown, its images.

        The function may return a `ToolOutput`, text, `None` (empty), an `Image`, a list of `str` and `Image`
        parts (text parts joined by newlines, each image named in the text by its placeholder), or any other
        value (sent as JSON). A parameter typed `ToolContext` gets `context` (default: the current one).

        Raises:
            ToolFailed: the tool ran and failed (`output` made text; `display` as the tool gave it).
            ToolError, Exception: whatever the tool raised.
        """
        name = self.context_parameter()
        if name is not None:
            arguments = {**arguments, name: context if context is not None else current_context()}
        try:
            if inspect.iscoroutinefunction(self.fn):  # watched: one that blocks the event loop is named
                value = await track(self.name, self.fn(**arguments))
            else:
                value = await run_in_daemon_thread(self.fn, arguments, name=self.name)
                if inspect.isawaitable(value):
                    value = await value
        except ToolFailed as exc:  # its output is text too, whatever the tool gave (rows, as it may return)
            if not isinstance(exc.output, str):
                exc.output = _as_output(exc.output).text
            raise
        return value if isinstance(value, ToolOutput) else _as_output(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


async def run_in_daemon_thread(fn: Callable[..., Any], kwargs: dict[str, Any], *, name: str = "tool") -> Any:
    """Run a sync function in a daemon thread (with this context's variables) and await its result.

    Unlike `asyncio.to_thread`, a call that timed out or was cancelled is abandoned for good: the
    process can exit without waiting for a function that never returns.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def target() -> None:
        try:
            value = context.run(fn, **kwargs)
        except BaseException as exc:  # delivered to the awaiting task, whatever it is
            loop.call_soon_threadsafe(settle, False, exc)
        else:
            loop.call_soon_threadsafe(settle, True, value)

    threading.Thread(target=target, name=f"crow-tool-{name}", daemon=True).start()
    return await future


def _required(model: Any) -> set[str]:
    return {name for name, f in model.model_fields.items() if f.is_required()}


def _as_output(value: Any) -> ToolOutput:
    """A tool's return value as text and images: an `Image`, or a list holding one or more `Image`s among
    text parts, keeps its images (each named in the text by its placeholder); anything else is text."""
    parts = [value] if isinstance(value, Image) else value if isinstance(value, list | tuple) else None
    if not parts or not any(isinstance(p, Image) for p in parts):
        return ToolOutput(_as_text(value))
    lines = [p.placeholder() if isinstance(p, Image) else _as_text(p) for p in parts]
    return ToolOutput("\n".join(lines), images=tuple(p for p in parts if isinstance(p, Image)))


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _schema_from_function(fn: Callable[..., Any], name: str) -> tuple[dict[str, Any], Any]:
    import docstring_parser
    from pydantic import Field, create_model

    described = {p.arg_name: p.description for p in docstring_parser.parse(inspect.getdoc(fn) or "").params}
    hints = _type_hints(fn)
    fields: dict[str, Any] = {}
    hidden = _context_parameter(fn)
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or pname == hidden:
            continue
        annotation = hints.get(pname, Any)
        default = ... if param.default is param.empty else param.default
        fields[pname] = (annotation, Field(default, description=described.get(pname)))
    model = create_model(f"{name}_arguments", **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema, model


def _context_parameter(fn: Callable[..., Any]) -> str | None:
    hints = _type_hints(fn)
    for pname, param in inspect.signature(fn).parameters.items():
        annotation = hints.get(pname, param.annotation)
        if isinstance(annotation, str):  # unresolved: compare by name (`ToolContext`, `ToolContext | None`)
            if "ToolContext" in re.split(r"[\s|\[\],.]+", annotation):
                return pname
        elif annotation is ToolContext or ToolContext in get_args(annotation):
            return pname
    return None


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Yields|Raises|Examples?):\s*$", re.MULTILINE)


def _summary(fn: Callable[..., Any]) -> str:
    """The docstring up to its first Google-style section (`Args:`, `Returns:` …)."""
    doc = inspect.getdoc(fn) or ""
    match = _SECTION.search(doc)
    return (doc[: match.start()] if match else doc).strip()


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to Any for those
        return {}


@overload
def tool(fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
         needs_approval: bool = False, parallel: bool = True, timeout_s: float | None = None,
         kind: ToolKind = "other", preview: Preview | None = None, subject: Subject | None = None) -> Tool: ...


@overload
def tool(fn: None = None, *, name: str | None = None, description: str | None = None,
         needs_approval: bool = False, parallel: bool = True, timeout_s: float | None = None,
         kind: ToolKind = "other", preview: Preview | None = None,
         subject: Subject | None = None) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool = False,
    parallel: bool = True,
    timeout_s: float | None = None,
    kind: ToolKind = "other",
    preview: Preview | None = None,
    subject: Subject | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` of a typed function; use bare (`@tool`) or with options (`@tool(name=…)`).

    The schema comes from the type hints, the description from the docstring before its `Args:`
    section, and each parameter's description from its `Args:` entry (derived on first use). A
    parameter typed `ToolContext` is left out of the schema and filled in by dispatch. The result is
    still callable like the function. `kind`, `preview` and `subject`: see `Tool`.

    Raises:
        ValueError: an unknown `kind`.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        tool_name = name or f.__name__
        return Tool(tool_name, description or _summary(f) or tool_name, f, needs_approval=needs_approval,
                    parallel=parallel, timeout_s=timeout_s, kind=kind, preview=preview, subject=subject)

    return wrap(fn) if fn is not None else wrap


class ToolRegistry:
    """Tools by name, in registration order. Loading problems are kept in `errors`, one line each."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._folders: set[Path] = set()
        self.errors: list[str] = []
        self.unusable: dict[str, tuple[Tool, str]] = {}
        """Tools dropped by `schemas()`, by name, with why (their schema cannot be derived)."""
        self._wire: dict[str, str] = {}
        """Wire name -> registered name, for tools whose names servers refuse."""
        self._stale = False
        self._renamed: set[str] = set()

    def register(self, item: Tool | Callable[..., Any], *, source: str | None = None) -> Tool:
        """Add a `Tool` (or a plain function, wrapped with `tool`); a taken name gets a `_2` … suffix."""
        t = item if isinstance(item, Tool) else tool(item)
        if source is not None:
            t.source = source
        base, n = t.name, 1
        while t.name in self._tools:
            n += 1
            t.name = f"{base}_{n}"
        if n > 1:
            taken = self._tools[base].source
            self.errors.append(f"tool {base!r} from {t.source} is named {t.name!r}: {base!r} is taken ({taken})")
        self._tools[t.name] = t
        self._stale = True
        return t

    def _assign_wire_names(self) -> None:
        """Give each tool whose name servers refuse a unique wire name; names servers take keep theirs
        (whatever the order of registration). Each renamed tool gets one line in `errors`."""
        if not self._stale:
            return
        self._stale = False
        taken = {name for name in self._tools if WIRE_NAME.fullmatch(name)}
        self._wire = {}
        for name in self._tools:
            if WIRE_NAME.fullmatch(name):
                continue
            base = wire = wire_name(name)
            k = 1
            while wire in taken:
                k += 1
                wire = f"{base[: 63 - len(str(k))]}_{k}"
            taken.add(wire)
            self._wire[wire] = name
            if name not in self._renamed:
                self._renamed.add(name)
                self.errors.append(f"tool {name!r} from {self._tools[name].source} is offered to the model as "
                                   f"{wire!r} (servers take only letters, digits, _ and - in tool names, at most 64)")

    def get(self, name: str) -> Tool | None:
        """The tool registered as `name`, or offered to the model as `name` (its wire name)."""
        found = self._tools.get(name)
        if found is None:
            self._assign_wire_names()
            if name in self._wire:
                found = self._tools.get(self._wire[name])
        return found

    def wire_name(self, name: str) -> str:
        """The name the model is offered the tool registered as `name` under (the same for most tools)."""
        self._assign_wire_names()
        return next((wire for wire, registered in self._wire.items() if registered == name), name)

    def wire_aliases(self) -> dict[str, str]:
        """Registered name -> wire name, for the tools whose names differ."""
        self._assign_wire_names()
        return {registered: wire for wire, registered in self._wire.items()}

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self, select: Callable[[Tool], bool] | None = None) -> list[dict[str, Any]]:
        """The request's `tools` list. A tool whose schema cannot be derived (a type pydantic cannot
        describe) is dropped with a line in `errors` and kept in `unusable`, so one bad plugin does not
        stop every run. `select`: derive only the tools it picks (`crow tools` skips the built-ins,
        whose schemas are known good, to start fast); the list then holds only those."""
        out = []
        for t in list(self._tools.values()):
            if select is not None and not select(t):
                continue
            try:
                entry = t.schema()
                if (wire := self.wire_name(t.name)) != t.name:
                    entry = {**entry, "function": {**entry["function"], "name": wire}}
                out.append(entry)
            except Exception as exc:
                del self._tools[t.name]
                why = (f"its schema cannot be derived ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''})")
                self.unusable[t.name] = (t, why)
                self.errors.append(self.dropped_line(t.name))
        return out

    def dropped_line(self, name: str) -> str:
        """The one-line warning for the unusable tool `name` (as `schemas()` adds it to `errors`)."""
        t, why = self.unusable[name]
        return f"tool {name!r} from {t.source} dropped: {why}"

    def load_builtins(self) -> None:
        from .builtin import BUILTIN_TOOLS

        for t in BUILTIN_TOOLS:
            self.register(replace(t), source="builtin")

    def load_entry_points(self) -> None:
        """Load every `crow_cli.tools` entry point: a Tool, a module of Tools, or `register_tools(register)`."""
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                self._collect(ep.load(), f"entry point {ep.name}")
            except (Exception, SystemExit) as exc:
                self.errors.append(f"tool plugin {ep.name!r} failed to load: {type(exc).__name__}: {exc}")

    def load_folder(self, folder: str | Path) -> None:
        """Load every `*.py` file (not starting with `_`) of `folder` as a module of tools."""
        path = Path(folder).expanduser()
        try:
            real = resolve_path(path)
        except OSError as exc:  # a symlink loop
            self.errors.append(f"tools folder {str(path)!r} is {exc.strerror or exc}")
            return
        if not path.is_dir():
            what = "is not a folder" if path.exists() else "does not exist"
            self.errors.append(f"tools folder {str(path)!r} {what}")
            return
        if real in self._folders:
            return  # listed twice (config tool_paths and --tools-dir)
        self._folders.add(real)
        for file in sorted(path.glob("*.py")):
            if file.name.startswith("_"):
                continue
            try:
                self._collect(_import_file(file), str(file))
            except (Exception, SystemExit) as exc:  # a plugin's sys.exit() at import must not end crow
                self.errors.append(f"tool file {str(file)!r} failed to load: {type(exc).__name__}: {exc}")

    def _collect(self, obj: Any, source: str) -> None:
        if isinstance(obj, Tool):
            self.register(obj, source=source)
        elif isinstance(obj, ModuleType):
            for value in list(vars(obj).values()):
                if isinstance(value, Tool):
                    self.register(value, source=source)
            hook = getattr(obj, "register_tools", None)
            if callable(hook):
                hook(lambda t: self.register(t, source=source))
        elif callable(obj):
            obj(lambda t: self.register(t, source=source))


def default_registry(tool_paths: Iterable[str] = (), *, builtins: bool = True) -> ToolRegistry:
    """Built-ins, then entry-point plugins, then each tool folder in order."""
    registry = ToolRegistry()
    if builtins:
        registry.load_builtins()
    registry.load_entry_points()
    for folder in tool_paths:
        registry.load_folder(folder)
    return registry


def _import_file(file: Path) -> ModuleType:
    digest = hashlib.sha1(str(resolve_path(file)).encode()).hexdigest()[:10]
    module_name = f"crow_cli_plugin_{digest}_{file.stem}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module

