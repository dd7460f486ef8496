"""A tool: `Tool`, what it returns (`ToolOutput`), and the `@tool` decorator that makes one of a typed function.

Schemas come from the function's type hints and its Google-style docstring (`Args:` section), through
pydantic, so a plain typed function is a tool. The registry (`tools.registry`) holds them by name.
"""

from __future__ import annotations

import contextvars
import inspect
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, overload

from ..errors import ToolError, ToolFailed
from ..history import ToolDisplay
from ..images import Image
from .context import ToolContext, current_context
from .watchdog import track

__all__ = ["Preapproved", "Preview", "Subject", "Tool", "ToolKind", "ToolOutput", "tool"]

ToolKind = Literal["read", "write", "search", "shell", "fetch", "plan", "other"]
"""What a tool does, in neutral terms each surface maps to its own: `read` (only reads), `write`
(changes files of the workspace), `search` (searches files), `shell` (runs a command line), `fetch`
(fetches from the network), `plan` (hands a plan over, ending plan mode: `exit_plan_mode`), `other`."""
Preview = Callable[[dict[str, Any], ToolContext], str]
"""Text shown before approval, from the validated arguments (the diff of an edit, a command line). It
may raise `ToolError` to answer the call with that error without asking (a pre-check)."""
Subject = Callable[[dict[str, Any]], str | None]
"""The command line that `NAME:PREFIX` approval rules are matched against, from the validated arguments."""
Preapproved = Callable[[dict[str, Any], ToolContext], str | None]
"""Why the person's configuration approves a call without asking, whatever the approval policy (only a
deny rule refuses it still), from the validated arguments and the run's context; None: approval decides."""


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
    preapproved: Preapproved | None = field(default=None, repr=False)
    """What the configuration approves of this tool's calls by itself (`web_fetch` of a host `[web]
    allow_hosts` names); None: nothing. See `Preapproved`."""

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
         kind: ToolKind = "other", preview: Preview | None = None, subject: Subject | None = None,
         preapproved: Preapproved | None = None) -> Tool: ...


@overload
def tool(fn: None = None, *, name: str | None = None, description: str | None = None,
         needs_approval: bool = False, parallel: bool = True, timeout_s: float | None = None,
         kind: ToolKind = "other", preview: Preview | None = None,
         subject: Subject | None = None,
         preapproved: Preapproved | None = None) -> Callable[[Callable[..., Any]], Tool]: ...


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
    preapproved: Preapproved | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` of a typed function; use bare (`@tool`) or with options (`@tool(name=…)`).

    The schema comes from the type hints, the description from the docstring before its `Args:`
    section, and each parameter's description from its `Args:` entry (derived on first use). A
    parameter typed `ToolContext` is left out of the schema and filled in by dispatch. The result is
    still callable like the function. `kind`, `preview`, `subject` and `preapproved`: see `Tool`.

    Raises:
        ValueError: an unknown `kind`.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        tool_name = name or f.__name__
        return Tool(tool_name, description or _summary(f) or tool_name, f, needs_approval=needs_approval,
                    parallel=parallel, timeout_s=timeout_s, kind=kind, preview=preview, subject=subject,
                    preapproved=preapproved)

    return wrap(fn) if fn is not None else wrap
