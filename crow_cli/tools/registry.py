"""The tool registry: tools by name, loaded from built-ins, entry points and folders.

Every source of tools goes through one plugin hook: a module's `register_tools(register)` (or its `Tool`
values), an entry point's object, a folder's files. crow's own tools are a plugin like any other, loaded
first (`DEFAULT_PLUGINS`, after llm's `default_plugins`).

Duplicate names get a `_2`, `_3` … suffix and every tool keeps its source (`builtin`, `entry point NAME`, a
file path, `mcp:SERVER`), as `crow tools` shows. A name servers refuse (outside `^[a-zA-Z0-9_-]{1,64}$`) is
offered to the model under a unique wire name (`names`, a `wire.names.ToolNames`), with one warning in
`errors`; `get` finds a tool by either name.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from ..paths import resolve_path
from ..wire.names import ToolNames
from .tool import Tool, tool

__all__ = ["DEFAULT_PLUGINS", "ENTRY_POINT_GROUP", "ToolRegistry", "default_registry"]

ENTRY_POINT_GROUP = "crow_cli.tools"
DEFAULT_PLUGINS: tuple[str, ...] = ("crow_cli.tools.builtin",)
"""The plugins crow brings (modules with a `register_tools(register)` hook), loaded as `builtin` before any other."""


class ToolRegistry:
    """Tools by name, in registration order. Loading problems are kept in `errors`, one line each."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._folders: set[Path] = set()
        self.errors: list[str] = []
        self.unusable: dict[str, tuple[Tool, str]] = {}
        """Tools dropped by `schemas()`, by name, with why (their schema cannot be derived)."""
        self._names = ToolNames(())
        self._stale = False
        self._renamed: set[str] = set()

    def register(self, item: Tool | Callable[..., Any], *, source: str | None = None) -> Tool:
        """Add a `Tool` (or a plain function, wrapped with `tool`); a taken name gets a `_2` … suffix. A built-in
        keeps its name whenever it comes (`task` and `skill` come after the plugins): a plugin's tool holding it
        moves to a suffix, as it would had the built-in come first."""
        t = item if isinstance(item, Tool) else tool(item)
        if source is not None:
            t.source = source
        held = self._tools.get(t.name)
        if t.source == "builtin" and held is not None and held.source != "builtin":
            del self._tools[t.name]
            self._tools[t.name] = t
            self._stale = True
            self.register(held)
            return t
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

    @property
    def names(self) -> ToolNames:
        """Each tool's name and its wire name, both ways: a name servers refuse gets a unique one, names servers
        take keep theirs (whatever the order of registration). Each renamed tool gets one line in `errors`."""
        if self._stale:
            self._stale = False
            self._names = ToolNames(self._tools)
            for name, wire in self._names.renamed.items():
                if name not in self._renamed:
                    self._renamed.add(name)
                    self.errors.append(f"tool {name!r} from {self._tools[name].source} is offered to the model "
                                       f"as {wire!r} (servers take only letters, digits, _ and - in tool names, "
                                       "at most 64)")
        return self._names

    def get(self, name: str) -> Tool | None:
        """The tool registered as `name`, or offered to the model as `name` (its wire name)."""
        found = self._tools.get(name)
        if found is None and (registered := self.names.own(name)) is not None:
            found = self._tools.get(registered)
        return found

    def wire_name(self, name: str) -> str:
        """The name the model is offered the tool registered as `name` under (the same for most tools)."""
        return self.names.wire(name)

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
        """Load crow's own tools: each of `DEFAULT_PLUGINS` through the plugin hook every plugin uses, as `builtin`."""
        for name in DEFAULT_PLUGINS:
            self._collect(importlib.import_module(name).register_tools, "builtin")

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

