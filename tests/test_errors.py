"""`crow_cli.errors`: the error tree its docstring draws is the one the code has."""

from __future__ import annotations

import importlib
import pkgutil
import re

import crow_cli
import crow_cli.errors as errors
from crow_cli.errors import ConfigError, CrowError, MaxTurnsExceeded, ProviderError
from crow_cli.local import LocalError
from crow_cli.sessions import SessionInUse, SessionStoreDamaged


def _subclasses(cls: type) -> set[type]:
    return {cls, *(c for sub in cls.__subclasses__() for c in _subclasses(sub))}


def test_the_docstring_tree_names_every_crow_error() -> None:
    # Every module is imported first: a subclass exists only once its module is, so the check does not
    # depend on which tests ran before it.
    for module in pkgutil.walk_packages(crow_cli.__path__, "crow_cli."):
        if not module.name.endswith("__main__"):  # it runs the CLI
            importlib.import_module(module.name)
    drawn = set(re.findall(r"\b([A-Z][A-Za-z]+)\b", errors.__doc__ or ""))
    ours = {c.__name__ for c in _subclasses(CrowError)
            if c.__module__.startswith("crow_cli") and not c.__name__.startswith("_")}  # private: internal
    assert {SessionInUse.__name__, SessionStoreDamaged.__name__, LocalError.__name__} <= ours
    assert ours - drawn == set()
    assert set(errors.__all__) == {name for name in vars(errors) if isinstance(getattr(errors, name), type)
                                   and issubclass(getattr(errors, name), CrowError)}


def test_errors_keep_their_facts_and_exit_codes() -> None:
    assert ConfigError("x").exit_code == 2 and CrowError("x").exit_code == 1
    limited = ProviderError("slow down", status=429, code="rate_limit", retry_after=2.0)
    assert (limited.status, limited.code, limited.retry_after) == (429, "rate_limit", 2.0)
    assert MaxTurnsExceeded(1).max_turns == 1 and "(--max-turns 1)" in str(MaxTurnsExceeded(1))
