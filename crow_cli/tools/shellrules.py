"""Matching shell command lines against `NAME:PREFIX` approval rules. Pure: no I/O, no tool names.

A command line is read by one real shell grammar, tree-sitter-bash (the one Codex uses for the same decision),
never by a lexer of our own, so the command word judged is the one sh runs. What the grammar cannot read whole, or
a word that is not a literal, fails closed: it matches every deny rule and no allow rule (`_judged`, `_read`).
Deny rules lean towards matching, allow rules are strict, and "always" is scoped to what each command runs.

Rules are guard rails, not a sandbox: they judge the line, not the files it runs. A script file (`sh x.sh`,
`. ./x`), a program copied or linked under another name, a command given in a config file or an option not
listed here, or the same effect by another program (`find -delete`, `shutil.rmtree`) is not recognised.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

__all__ = ["allow_matches", "command_prefixes", "deny_matches", "rule_words", "split_commands"]

_UNKNOWN = "\0"
"""Marks where a word holds what is not a literal (an expansion, a pattern): NUL is in no argument sh passes."""
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
# words that run the rest of their arguments as a command (after flags and their values)
_WRAPPERS = frozenset({"time", "exec", "command", "builtin", "env", "nohup", "nice", "ionice", "sudo", "doas",
                       "xargs", "timeout", "setsid", "stdbuf", "chrt", "taskset", "flock", "watch", "strace",
                       "unbuffer", "chroot", "runuser", "su", "parallel", "busybox", "toybox", "coproc", "run0",
                       # debuggers, tracers, namespaces, fake roots, remote shells: they run their arguments
                       "fakeroot", "unshare", "nsenter", "gdb", "lldb", "valgrind", "ltrace", "catchsegv", "ssh",
                       "proot", "firejail", "bwrap", "systemd-run", "setpriv", "capsh", "pkexec", "sg", "faketime",
                       "torsocks", "tsocks", "proxychains", "proxychains4", "rlwrap", "xvfb-run", "dbus-launch",
                       "dbus-run-session", "eatmydata", "nocache", "chronic", "caffeinate", "sandbox-exec"})
# wrappers whose options take no value: the first word after their options is the command they run
_PLAIN_WRAPPERS = frozenset({"nohup", "time", "command", "builtin", "setsid", "eatmydata", "chronic", "nocache",
                             "unbuffer", "caffeinate", "fakeroot"})
_RESERVED = frozenset({"{", "}", "(", ")", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until",
                       "for", "in", "case", "esac", "select", "function", "[[", "]]", "coproc", "time"})
_SHELL_NAMES = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "rbash", "yash", "posh"})
_SHELLS = _SHELL_NAMES | {"busybox", "eval"}
# words whose later arguments may be a script they evaluate (`trap 'CMD' EXIT`, `su -c 'CMD'`, `env -S 'CMD'`)
_EVALUATORS = _SHELLS | {"trap", "su", "runuser", "env", "watch", "parallel", "flock", "ssh", "script", "sg"}
# programs that read code from standard input when given no script argument (`… | sh`, `python3 < x.py`)
_CODE_READERS = _SHELL_NAMES | {"python", "python2", "python3", "pypy", "pypy3", "perl", "ruby", "node", "php",
                                "lua", "tclsh", "irb", "deno", "bun"}
# interpreters whose code can run a command through a string (`os.system("…")`, `system("…")`)
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
_INTERPRETERS = _CODE_READERS | _AWKS
# what runs a command from interpreter code (`os.system`, `subprocess`, `exec`, perl's backquotes, awk's pipes):
# a rule cannot judge a command such code builds, so code holding one fails closed
_SPAWNS = re.compile(r"(?<![a-z])system|exec(?!ut)|popen|spawn|subprocess|check_output|check_call|getoutput|"
                     r"__import__|importlib|getattr|ctypes|child_process|\brequire\b|readpipe|\bqx|%x|Open3|passthru|"
                     r"proc_open|pcntl|`|\beval\b|\bfork\b")
_CODE_FLAGS = re.compile(r"-[A-Za-z]*[ceEr]|--eval|--command|--exec")  # `-c CODE`, `perl -e`, `php -r`, `node --eval`
_VALUE_FLAGS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file", "-W", "-X", "-M", "--require"})
"""Options of shells and interpreters that take the next word as their value (`bash -o errexit`, `python -W x`)."""
# bash builtins that take variable names (their subscripts are evaluated: `printf -v 'a[$(rm x)]'`)
_NAME_TAKERS = frozenset({"let", "read", "mapfile", "readarray", "wait", "unset", "declare",
                          "typeset", "local", "export", "readonly", "getopts", "shift", "return", "exit"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_STRING_LITERAL = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'|`((?:[^`\\]|\\.)*)`")
_MAX_NESTING = 4
# where a backslash is no escape, so a backslash-newline in it is no line continuation
_VERBATIM = frozenset({"raw_string", "comment", "heredoc_body", "heredoc_content", "ansi_c_string"})
_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_OUTPUT_OPERATORS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<>"})

# Long options with a short spelling ("": any command), and short flags that are the same option.
_SHORT_OF: dict[str, dict[str, str]] = {
    "": {"--recursive": "-r", "--force": "-f"},
    **{cmd: {"--recursive": "-R"} for cmd in ("chmod", "chown", "chgrp")},
}
_SAME_FLAGS: dict[str, dict[str, str]] = {"rm": {"-R": "-r"}, "cp": {"-R": "-r"}}
# Known long options of common destructive commands (GNU coreutils, git), so that an abbreviation is
# read as getopt reads it. An abbreviation also matches any long option the rule itself spells.
_LONG_OPTIONS: dict[str, tuple[str, ...]] = {
    "rm": ("--force", "--interactive", "--one-file-system", "--no-preserve-root", "--preserve-root",
           "--recursive", "--dir", "--verbose"),
    "cp": ("--force", "--recursive", "--remove-destination", "--no-clobber", "--interactive", "--link",
           "--symbolic-link", "--update", "--verbose", "--archive"),
    "mv": ("--force", "--interactive", "--no-clobber", "--update", "--verbose"),
    "chmod": ("--recursive", "--changes", "--quiet", "--silent", "--verbose", "--reference",
              "--preserve-root", "--no-preserve-root"),
    "chown": ("--recursive", "--changes", "--quiet", "--silent", "--verbose", "--reference", "--from",
              "--dereference", "--no-dereference", "--preserve-root", "--no-preserve-root"),
    "chgrp": ("--recursive", "--changes", "--quiet", "--silent", "--verbose", "--reference",
              "--dereference", "--no-dereference", "--preserve-root", "--no-preserve-root"),
    "git": ("--force", "--force-with-lease", "--force-if-includes", "--delete", "--mirror", "--all", "--tags",
            "--prune", "--no-verify", "--hard", "--soft", "--mixed", "--merge", "--keep", "--quiet"),
    "dd": (),
    "shred": ("--force", "--remove", "--zero", "--iterations", "--exact", "--verbose"),
}


# --- reading a line with the grammar ---------------------------------------------------------------------

@cache
def _parser() -> Parser:
    """The tree-sitter-bash parser, made on first use (the grammar is not imported by light commands)."""
    from tree_sitter import Language, Parser
    from tree_sitter_bash import language

    return Parser(Language(language()))


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")  # a slice may cut an encoded lone surrogate: such a line is unreadable


@dataclass(frozen=True, slots=True)
class _Command:
    """One simple command as sh runs it: `words` (assignments first, then the command word and its arguments,
    redirections left out), each unquoted, with `_UNKNOWN` where it holds what is not a literal; `shown`, the
    same words as written where they are not literals."""

    words: tuple[str, ...]
    shown: tuple[str, ...]
    assignments: int = 0
    simple: bool = True
    """A command that runs a program or builtin (not a bare assignment, `export …`, `[[ … ]]` or `(( … ))`)."""
    stdin: str | None = None
    """What its standard input is, when the line writes it (a here-document or here-string); else None."""

    @property
    def run(self) -> tuple[str, ...]:
        """The words that run: the command word and its arguments."""
        return self.words[self.assignments:]


@dataclass
class _Reading:
    """What a line does, as far as rules can judge it."""

    commands: list[_Command] = field(default_factory=list)
    unreadable: str = ""
    """Why rules cannot judge the line ("" when they can): it matches every deny rule and no allow rule."""
    substitution: bool = False
    """A command or process substitution stands somewhere (allow rules approve none)."""
    output: bool = False
    """A redirection writes a file (not `2>&1`, not `>/dev/null`)."""
    evaluation: bool = False
    """bash evaluates some word as code (arithmetic, `[[ … ]]`, `${a[…]}`, `${x@P}`, `${!x}`)."""
    names: bool = False
    """A command takes variable names, whose subscripts bash evaluates (`declare`, `unset`, `printf -v`, `[ -v`)."""
    latent: bool = False
    """A literal holds a command substitution's text (`'a[$(rm x)]'`): code, if bash evaluates it."""


def _joined(line: str) -> str:
    """`line` with each backslash-newline removed where sh removes it before reading words (outside single
    quotes, `$'…'`, comments and here-document text); tree-sitter-bash reads one as a space (`r\\⏎m` would be
    two words)."""
    if "\\\n" not in line:
        return line
    data = _encode(line)
    root = _parser().parse(data).root_node
    cuts: list[int] = []
    for found in re.finditer(rb"\\\n", data):
        start = found.start()
        run = len(data[:start + 1]) - len(data[:start + 1].rstrip(b"\\"))
        if run % 2 == 0:  # `\\⏎`: an escaped backslash, then a newline
            continue
        node = root.descendant_for_byte_range(start, start + 1)
        if node is not None and any(n.type in _VERBATIM for n in _ancestry(node)):
            continue
        cuts.append(start)
    for start in reversed(cuts):
        data = data[:start] + data[start + 2:]
    return _decode(data)


def _ancestry(node: Node) -> list[Node]:
    found = []
    current: Node | None = node
    while current is not None:
        found.append(current)
        current = current.parent
    return found


@lru_cache(maxsize=256)
def _read(line: str) -> _Reading:
    """What the grammar finds in `line` (see the module docstring). Never raises: what fails to be read is
    unreadable."""
    if _UNKNOWN in line or any("\ud800" <= c <= "\udfff" for c in line):
        return _Reading(unreadable="a NUL or a lone surrogate, which no shell reads as written")
    try:
        return _reading(line)
    except Exception as exc:  # a grammar that fails on some input must not let that input through
        return _Reading(unreadable=f"the shell grammar failed ({type(exc).__name__})")


def _reading(line: str) -> _Reading:
    text = _joined(line)
    data = _encode(text)
    reading = _Reading()
    root = _parser().parse(data).root_node
    _walk(root, data, reading, ())
    skipped = _skipped(root, data)
    if skipped:  # text the grammar read as nothing: what sh makes of it is unknown
        reading.unreadable = reading.unreadable or f"the shell grammar skips {skipped!r}"
    if hidden := _hidden(root, data):
        reading.unreadable = reading.unreadable or hidden
    for command in reading.commands:
        why = _unjudgeable(command)
        if why:
            reading.unreadable = reading.unreadable or why
        reading.names = reading.names or (command.simple and _takes_names(command.run))
    if reading.latent and (reading.evaluation or reading.names):  # `x='a[$(rm v)]'; echo $((x))` in bash
        reading.unreadable = reading.unreadable or "a string that bash may evaluate as code"
    return reading


_DASH_READS_OTHERWISE = frozenset({"ansi_c_string", "translated_string"})
_SUBSTITUTING = re.compile(rb"\$\(|`|[<>]\(")


def _hidden(root: Node, data: bytes) -> str:
    """Why the tree hides what the line runs, or "": quoting bash has and /bin/sh (dash, which runs the
    commands) reads otherwise (`$'\\' ; rm v ; '\\'` is one `echo` to bash, three commands to dash), or a
    command substitution inside a `${x#pattern}` the grammar keeps as opaque text (both shells run it)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in _DASH_READS_OTHERWISE:
            return f"{_text(node, data)!r}: quoting /bin/sh reads otherwise than bash"
        if node.type == "regex" and _SUBSTITUTING.search(data[node.start_byte:node.end_byte]):
            return f"a command substitution inside the pattern {_text(node, data)!r}"
        stack.extend(node.children)
    return ""


def _takes_names(run: Sequence[str]) -> bool:
    """Whether the command `run` takes variable names, whose subscripts bash evaluates (`printf -v NAME`)."""
    if not run:
        return False
    base = _basename(run[0])
    if base in ("printf", "test", "["):
        return "-v" in run[1:]
    return base in _NAME_TAKERS


_ADJACENT = frozenset({"concatenation", "simple_expansion"})  # pieces that touch: no blank between them
_OPAQUE = frozenset({"heredoc_body", "string", "raw_string", "comment", "ansi_c_string", "translated_string"})


def _skipped(root: Node, data: bytes) -> str:
    """The first text of `data` (but blanks) that no node of the tree `root` covers, or ""."""
    gaps = [data[:root.start_byte], data[root.end_byte:]]
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0 or node.type in _OPAQUE:
            continue
        position = node.start_byte
        for n, child in enumerate(node.children):
            gap = data[position:child.start_byte]
            if not (gap.strip() == b"-" and n and _dash_before_heredoc(node.children[n - 1], [child], data)
                    and node.children[n - 1].type == "command"):  # read as an argument: see `_walk`
                gaps.append(gap)
            stack.append(child)
            position = child.end_byte
        gaps.append(data[position:node.end_byte])
        if node.type in _ADJACENT and any(gaps[-len(node.children) - 1:]):
            return _text(node, data)  # `$ ${x}` read as one word: blanks inside it
    return next((_decode(g).strip() for g in gaps if g.strip(b" \t\r\n")), "")


def _dash_before_heredoc(body: Node, redirects: list[Node], data: bytes) -> bool:
    """Whether the grammar dropped a `-` argument between the command `body` and its first redirection
    (`python3 - <<'EOF'`: tree-sitter-bash reads the `-` as nothing)."""
    first = min((r.start_byte for r in redirects), default=body.end_byte)
    return first > body.end_byte and data[body.end_byte:first].strip() == b"-"


def _text(node: Node, data: bytes) -> str:
    return _decode(data[node.start_byte:node.end_byte])


def _walk(node: Node, data: bytes, reading: _Reading, extra: tuple[Node | str, ...],
          redirects: Sequence[Node] = ()) -> None:
    """Collect the commands under `node` into `reading`; `extra`: words the grammar hung on a redirection that
    are arguments of the command `node` (`rm >/dev/null -rf x`), and `redirects` its redirections outside it."""
    kind = node.type
    if node.is_missing or kind == "ERROR":
        reading.unreadable = reading.unreadable or f"the shell grammar cannot read {_text(node, data)!r}"
        return
    if kind == "redirected_statement":
        body = node.child_by_field_name("body")
        redirects = node.children_by_field_name("redirect")
        extras: tuple[Node | str, ...] = tuple(word for redirect in redirects
                                              for word in redirect.children_by_field_name("destination")[1:])
        if body is not None and body.type == "command" and _dash_before_heredoc(body, redirects, data):
            extras = ("-", *extras)
        for child in node.children:
            if child == body:
                if extras and body.type != "command":
                    reading.unreadable = reading.unreadable or "words after a redirection of a compound command"
                _walk(child, data, reading, extras, redirects)
            else:
                _walk(child, data, reading, ())
        return
    if kind == "command":
        _command(node, data, reading, extra, redirects)
    elif kind in ("declaration_command", "unset_command"):
        reading.names = True
        words = [_assignment(child, data) if child.type == "variable_assignment" else _word(child, data)
                 for child in node.children if child.is_named and not _is_redirect(child)]
        head = node.children[0]
        reading.commands.append(_Command((_text(head, data), *words), (_text(head, data), *(
            _text(c, data) for c in node.children if c.is_named and not _is_redirect(c))), simple=False))
    elif kind == "variable_assignments" or (kind == "variable_assignment" and node.parent is not None and (
            node.parent.type in ("program", "list", "compound_statement", "do_group", "subshell", "if_statement",
                                 "elif_clause", "else_clause", "case_item", "pipeline", "negated_command",
                                 "redirected_statement", "command_substitution", "process_substitution"))):
        pairs = node.named_children if kind == "variable_assignments" else [node]
        reading.commands.append(_Command(tuple(_assignment(p, data) for p in pairs),
                                         tuple(_text(p, data) for p in pairs), len(pairs), simple=False))
    elif kind == "test_command":
        opening = _text(node.children[0], data)
        reading.commands.append(_Command((opening,), (opening,), simple=False))
        reading.evaluation = reading.evaluation or opening == "[["
        reading.names = reading.names or "-v" in _text(node, data).split()  # `[ -v 'a[…]' ]`
    elif kind == "compound_statement" and node.children and node.children[0].type == "((":
        reading.commands.append(_Command(("((",), ("((",), simple=False))
        reading.evaluation = True
    elif kind in ("arithmetic_expansion", "c_style_for_statement"):
        reading.evaluation = True
    elif kind == "expansion":
        inner = _text(node, data)
        if inner.startswith("${!") or "@" in inner or any(c.type == "subscript" for c in node.named_children):
            reading.evaluation = True
    elif kind in ("command_substitution", "process_substitution"):
        reading.substitution = True
        if node.children and node.children[0].type == "`" and "\\`" in _text(node, data):
            reading.unreadable = reading.unreadable or "a command substitution inside backquotes"
    elif kind in ("word", "raw_string", "string_content", "ansi_c_string", "heredoc_body", "heredoc_content"):
        text = _text(node, data)
        reading.latent = reading.latent or any(mark in text for mark in ("$(", "`", "$["))
        if kind in ("word", "string_content") and ("$(" in text or "`" in text) and _substitutions(text):
            reading.unreadable = reading.unreadable or "a substitution the shell grammar did not read"
    elif kind == "heredoc_redirect":
        start = next((c for c in node.children if c.type == "heredoc_start"), None)
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        if start is not None and body is not None and not any(q in _text(start, data) for q in "'\"\\") and (
                _substitutions(_text(body, data)) > _count(body, "command_substitution")):
            reading.unreadable = reading.unreadable or "a substitution in a here-document the grammar did not read"
    elif kind == "file_redirect":
        _redirect(node, data, reading)
    if _is_redirect(node) and node.child_by_field_name("descriptor") is None and re.search(
            rb"(?:^|[\s;&|()<>])(?:\d+|\{\w+\})$", data[max(0, node.start_byte - 64):node.start_byte]):
        reading.unreadable = reading.unreadable or "a redirection's descriptor read as a word"  # `sh 0< <(…)`
    for child in node.children:
        _walk(child, data, reading, ())


def _substitutions(text: str) -> int:
    """How many command substitutions unquoted text opens (`$(`, a backquote pair), escapes left out."""
    bare = re.sub(r"\\.", "", text, flags=re.DOTALL)
    return len(re.findall(r"\$\((?!\()", bare)) + (bare.count("`") + 1) // 2


def _count(node: Node, kind: str) -> int:
    """How many nodes of type `kind` are under `node`."""
    return sum(_count(child, kind) + (child.type == kind) for child in node.children)


def _is_redirect(node: Node) -> bool:
    return node.type in ("file_redirect", "heredoc_redirect", "herestring_redirect")


def _redirect(node: Node, data: bytes, reading: _Reading) -> None:
    """Note whether the file redirection `node` writes a file."""
    operator = next((_text(c, data) for c in node.children if not c.is_named), "")
    targets = node.children_by_field_name("destination")
    target = _word(targets[0], data) if targets else _UNKNOWN
    if operator not in _OUTPUT_OPERATORS or target in _HARMLESS_TARGETS:
        return
    if operator == ">&" and (target.isdigit() or target == "-"):  # `>&2`: a descriptor, no file
        return
    reading.output = True


def _command(node: Node, data: bytes, reading: _Reading, extra: tuple[Node | str, ...],
             redirects: Sequence[Node]) -> None:
    """The simple command `node` (its assignments, command word and arguments; `extra` more arguments; its
    `redirects` outside it)."""
    assignments: list[Node] = []
    words: list[Node | str] = []
    inputs = [r for r in redirects if _is_input(r, data)]
    for child in node.children:
        if child.type == "variable_assignment" and not words:
            assignments.append(child)
        elif _is_redirect(child):
            inputs += [child] if _is_input(child, data) else []
            if len(child.children_by_field_name("destination")) > 1:
                reading.unreadable = reading.unreadable or "words after a redirection inside a command"
        elif child.type == "command_name":
            words.extend(child.named_children)
            if _text(child, data) == "!":  # `! ! rm`: bash negates twice
                words.clear()
        elif child.is_named:
            words.append(child)
    words.extend(extra)
    shown = [_text(a, data) for a in assignments]
    literal = [_assignment(a, data) for a in assignments]
    for word in words:
        value = word if isinstance(word, str) else _word(word, data)
        literal.append(value)
        shown.append(value if _UNKNOWN not in value or isinstance(word, str) else _text(word, data))
    stdin = _input_text(inputs[0], data) if len(inputs) == 1 else None
    reading.commands.append(_Command(tuple(literal), tuple(shown), len(assignments), stdin=stdin))


def _is_input(redirect: Node, data: bytes) -> bool:
    """Whether `redirect` gives the standard input (`<file`, a here-document or here-string)."""
    if redirect.type in ("heredoc_redirect", "herestring_redirect"):
        return True
    descriptor = redirect.child_by_field_name("descriptor")
    operator = next((_text(c, data) for c in redirect.children if not c.is_named), "")
    return operator in ("<", "<&") and (descriptor is None or _text(descriptor, data) == "0")


def _input_text(redirect: Node, data: bytes) -> str | None:
    """The text a here-document or here-string gives as standard input, when it is written on the line
    (a quoted here-document, or one without expansions); None otherwise (a file, an expansion)."""
    if redirect.type == "herestring_redirect":
        value = _word(redirect.named_children[-1], data) if redirect.named_children else _UNKNOWN
        return None if _UNKNOWN in value else value
    if redirect.type != "heredoc_redirect":
        return None
    start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
    body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
    if start is None:
        return None
    if body is None:
        return ""
    quoted = any(q in _text(start, data) for q in "'\"\\")
    if not quoted and any(c.type != "heredoc_content" for c in body.named_children):
        return None
    return _text(body, data)


def _assignment(node: Node, data: bytes) -> str:
    """`NAME=value` of an assignment node, the value unquoted (`_UNKNOWN` where not a literal)."""
    name = node.child_by_field_name("name")
    value = node.child_by_field_name("value")
    operator = "+=" if any(c.type == "+=" for c in node.children) else "="
    return (_text(name, data) if name else "") + operator + (_word(value, data) if value else "")


_DQ_ESCAPES = re.compile(r"\\([\\\"$`\n])")


def _word(node: Node, data: bytes) -> str:
    """The word `node` unquoted as sh unquotes it, with `_UNKNOWN` where it is not a literal."""
    kind = node.type
    text = _text(node, data)
    if kind in ("word", "command_name"):
        return _unquoted(text) if kind == "word" else "".join(_word(c, data) for c in node.named_children)
    if kind in ("number", "variable_name", "test_operator"):
        return text
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        if any(c.type != "string_content" for c in node.named_children):
            return _UNKNOWN
        return _DQ_ESCAPES.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text[1:-1])
    if kind == "translated_string":
        return "".join(_word(c, data) for c in node.named_children)
    if kind == "ansi_c_string":
        return text[2:-1] if "\\" not in text else _UNKNOWN
    if kind == "concatenation":
        return "".join(_word(c, data) for c in node.named_children)
    return _UNKNOWN  # expansions, substitutions, brace expressions: what they become is not written here


def _unquoted(text: str) -> str:
    """An unquoted word's value: backslashes escape, and a glob or brace pattern is not a literal."""
    out: list[str] = []
    escaped = False
    for c in text:
        if escaped:
            out.append(c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in "*?[":
            return _UNKNOWN if text not in ("[", "[[") else text
        else:
            out.append(c)
    value = "".join(out)
    if re.search(r"\{[^{}]*(,|\.\.)[^{}]*\}", text):  # `{rm,-rf,x}`: bash expands it
        return _UNKNOWN
    return value


def _unjudgeable(command: _Command) -> str:
    """Why no rule can judge `command` ("" when one can): its command word is not a literal, it renames
    commands, or it is a shell or interpreter whose code cannot be seen."""
    if not command.simple:
        return ""
    run = command.run
    if not run:
        return ""
    if _UNKNOWN in run[0]:
        return "a command word that is not a literal"
    bases = [_basename(w) for w in run]
    if (bases[0] == "alias" and any("=" in w for w in run[1:])) or (bases[0] == "hash" and "-p" in run[1:]):
        return "a command renamed by an alias or hash"
    if bases[0] in ("enable", "source", ".") and any(_UNKNOWN in w or _is_stream(w) for w in run[1:]):
        return "a script that cannot be seen"
    if bases[0] in _WRAPPERS or _launcher(run):
        starts: Sequence[int] = range(len(run))
    elif bases[0] == "find":
        starts = [n + 1 for n, w in enumerate(run) if w in _FIND_EXEC and n + 1 < len(run)]
    else:
        starts = [0]
    filled = _placeholders(run)
    for i in starts:
        if bases[i] not in _INTERPRETERS:
            continue
        code = _code(bases[i], run[i + 1:])
        if code == "hidden" or (code == "stdin" and command.stdin is None):
            return "a shell or interpreter whose code cannot be seen"
        if any(p in word for word in code if isinstance(code, list) for p in filled):
            return "a shell or interpreter whose code its input fills in"
    return ""


def _placeholders(run: Sequence[str]) -> set[str]:
    """What `xargs`, `parallel` or `find -exec` replace in the command they run (`{}`, `xargs -I %`'s `%`)."""
    base = _basename(run[0])
    if base not in ("xargs", "parallel", "find"):
        return set()
    found = {"{}"}
    for n, word in enumerate(run[1:], 1):
        if word in ("-I", "-i", "--replace") and n + 1 < len(run):
            found.add(run[n + 1])
        elif word.startswith(("-I", "--replace=")) and len(word) > 2:
            found.add(word.split("=", 1)[1] if word.startswith("--") else word[2:])
    return {p for p in found if p}


def _code(program: str, args: Sequence[str]) -> list[str] | str:
    """The code `program` (a shell, an interpreter or awk) given `args` runs, as far as the line writes it: its
    code words (`-c CODE`, `perl -e CODE`, awk's program), [] for a script file or module (code in a file, as
    for any program), `"stdin"` when it reads its code from its standard input (no script, `-s`, `-`, or `-c`
    with nothing after it: `xargs sh -c` fills it in), `"hidden"` when the code is not a literal (`sh <(…)`,
    `sh -c "$X"`, `sh /dev/fd/3`)."""
    shell, awk = program in _SHELL_NAMES, program in _AWKS
    skip = code_next = False
    for n, word in enumerate(args):
        if skip:
            skip = False
        elif code_next:
            return "hidden" if _UNKNOWN in word else [word]
        elif word == "-" or (shell and re.fullmatch(r"-[A-Za-z]*s[A-Za-z]*", word)):
            return "stdin"
        elif word == "--":
            rest = args[n + 1:]
            if not rest:
                return "stdin"
            return "hidden" if _UNKNOWN in rest[0] or _is_stream(rest[0]) else [rest[0]] if awk else []
        elif re.fullmatch(r"-[A-Za-z]*c[A-Za-z]*", word) if shell else (
                _CODE_FLAGS.fullmatch(word) or word in ("--source", "--print")):
            code_next = True
        elif not shell and word in ("-m", "--module"):
            return [] if n + 1 < len(args) and _UNKNOWN not in args[n + 1] else "hidden"
        elif awk and word == "-f":
            return "hidden" if n + 1 >= len(args) or _UNKNOWN in args[n + 1] or _is_stream(args[n + 1]) else []
        elif word in _VALUE_FLAGS or (awk and word in ("-v", "-F")):
            skip = True
        elif word.startswith(("-", "+")) and len(word) > 1 and _UNKNOWN not in word:
            continue
        elif _UNKNOWN in word or _is_stream(word):
            return "hidden"
        else:
            return [word] if awk else []  # awk's program; a script file
    return "stdin"


def _is_stream(path: str) -> bool:
    """Whether `path` names a stream, not a file (`/dev/stdin`, `/dev/fd/0`, `/proc/self/fd/3`)."""
    return path.startswith(("/dev/", "/proc/"))


def split_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell command line, as sh reads it, each as its unquoted words (assignments
    first; redirections left out; a word that is not a literal as it is written). Never raises."""
    return [list(c.shown) for c in _read(line).commands]



# --- deny ---------------------------------------------------------------------------------------------------

def rule_words(prefix: str) -> list[str]:
    """The words of a rule's command prefix (`"git  status"` → `["git", "status"]`); [] when it has none."""
    try:
        return shlex.split(prefix)
    except ValueError:  # unbalanced quotes: compare plain words
        return prefix.split()


def _basename(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1] or word


def _prefix_at(words: Sequence[str], i: int, prefix: list[str]) -> bool:
    """`prefix` at `words[i:]`, the command word compared by basename (`/bin/rm` is `rm`); an argument that is
    not a literal may be any of the rule's words."""
    head = words[i: i + len(prefix)]
    if _basename(words[i]) != _basename(prefix[0]):
        return False
    if len(prefix) > 1 and any(_UNKNOWN in w for w in words[i + 1:]):
        return True  # `rm $FLAGS x`, `rm *`: its options cannot be judged
    return len(head) == len(prefix) and list(head[1:]) == prefix[1:]


def _options(words: Sequence[str], command: str, known: tuple[str, ...]) -> tuple[set[str], list[str]]:
    """The words after `command`, split into normalised flags (`-rf` → `-r`, `-f`; `--force` → `-f`;
    `--forc` → every long option in `known` it abbreviates) and the other words in order (everything
    after `--` is one of those)."""
    shorts = {**_SHORT_OF[""], **_SHORT_OF.get(command, {})}
    same = _SAME_FLAGS.get(command, {})
    flags: set[str] = set()
    others: list[str] = []
    for n, word in enumerate(words):
        if word == "--":
            others += words[n + 1:]
            break
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            meant = [name] if name in known else [o for o in known if o.startswith(name)] or [name]
            flags.update(shorts.get(option, option) for option in meant)
        elif word.startswith("-") and len(word) > 1:
            flags.update(same.get(f"-{c}", f"-{c}") for c in word[1:])
        else:
            others.append(word)
    return flags, others


def _in_order(needles: list[str], words: list[str]) -> bool:
    rest = iter(words)
    return all(any(w == n for w in rest) for n in needles)


def _flags_at(words: Sequence[str], i: int, prefix: list[str]) -> bool:
    """`prefix` at `words[i:]` with options compared as flags: the rule's flags are among the command's
    and its other words appear in the command in order."""
    command = _basename(prefix[0])
    if _basename(words[i]) != command:
        return False
    rule_longs = tuple(w.split("=", 1)[0] for w in prefix[1:] if w.startswith("--") and w != "--")
    known = (*_LONG_OPTIONS.get(command, ()), *rule_longs)
    rule_flags, rule_others = _options(prefix[1:], command, known)
    flags, others = _options(words[i + 1:], command, known)
    return rule_flags <= flags and _in_order(rule_others, others)


def _literals(word: str) -> list[str]:
    """The string literals in an interpreter's code (`os.system("rm -rf x")` → `rm -rf x`), and all of
    them joined (`["rm", "-rf", "x"]` → `rm -rf x`)."""
    found = [a or b or c for a, b, c in _STRING_LITERAL.findall(word)]
    return [*found, " ".join(found), "".join(found)] if len(found) > 1 else found


def _scripts(words: Sequence[str]) -> list[str]:
    """The arguments of an evaluator `words[0]` that may be a script: those holding a space or an operator,
    the one after a `-c`-like flag (`sh -c "$CMD"`, `su -c`, `env -S`), and any that is not a literal (but an
    assignment's value: `env A=$B make`); an alias's values."""
    if _basename(words[0]) == "alias":
        return [w.split("=", 1)[1] for w in words[1:] if "=" in w]
    if _basename(words[0]) == "trap":  # `trap CMD EXIT`: its first argument, a word or a line
        return [w for w in words[1:] if w != "--"]
    attached = [w.split("=", 1)[1] if w.startswith("--") else w[w.index("S") + 1:] for w in words[1:]
                if re.fullmatch(r"-[A-Za-z]*S.+|--split-string=.*", w, re.DOTALL)]  # `env -S'CMD'`
    script = _shell_script(words) if _basename(words[0]) in _SHELL_NAMES else None
    return [w for n, w in enumerate(words[1:], 1)
            if re.search(r"[\s;&|()<>`]|\$\(", w) or re.fullmatch(r"-[A-Za-z]*c|-S|--split-string|--command",
                                                                  words[n - 1])
            or (_UNKNOWN in w and not _ASSIGNMENT.match(w)) or n == script] + attached


# options whose value is a command line a program runs (`tar --to-command=CMD`, `git -c core.pager=CMD`, `ssh -o
# ProxyCommand=CMD`, `make --eval='$(shell CMD)'`, `vim -c '!CMD'`)
_COMMAND_OPTION = re.compile(r"--(?:eval|to-command|use-compress-program|compress-program|rsh|call|exec|command|"
                             r"pager|editor|upload-pack|receive-pack|ssh|shell-command)(?:=(.*))?", re.DOTALL)
_COMMAND_SHORT: dict[str, frozenset[str]] = {
    "tar": frozenset({"-I", "-F"}), "rsync": frozenset({"-e"}), "npx": frozenset({"-c"}), "npm": frozenset({"-c"}),
    "git": frozenset({"-c"}), "ssh": frozenset({"-o"}), "scp": frozenset({"-o", "-S"}), "sftp": frozenset({"-o", "-S"}),
    "zip": frozenset({"-TT"}), "vim": frozenset({"-c"}), "vi": frozenset({"-c"}), "nvim": frozenset({"-c"}),
    "ex": frozenset({"-c"}), "man": frozenset({"-P"}), "gdb": frozenset({"-ex"}), "less": frozenset({"-+"}),
}
_COMMAND_VALUE = re.compile(r"(?:[A-Za-z][\w-]*\.[\w.-]+=|\w*Command=)?(?:\$\(shell\s+)?[:!]*(.*?)\)?", re.DOTALL)


def _option_scripts(words: Sequence[str]) -> list[str]:
    """The command lines given to the program `words[0]` as an option's value (see `_COMMAND_OPTION`): a
    `key=` is left out (`core.pager=CMD`), and so are a leading `!` or `:!` (a git alias, vim) and make's
    `$(shell …)`."""
    shorts = _COMMAND_SHORT.get(_basename(words[0]), frozenset())
    values: list[str] = []
    for n, word in enumerate(words[1:], 1):
        option = _COMMAND_OPTION.fullmatch(word)
        if option is not None and option.group(1) is not None:
            values.append(option.group(1))
        elif (option is not None or word in shorts) and n + 1 < len(words):
            values.append(words[n + 1])
    return [value if _UNKNOWN in value else _COMMAND_VALUE.fullmatch(value).group(1)  # type: ignore[union-attr]
            for value in values]


def _shell_script(words: Sequence[str]) -> int | None:
    """Where the command string of a shell `words[0]` given `-c` stands (`bash -cx 'CMD'`, `sh -ec CMD`: the
    first word after its options), or None."""
    command = False
    skip = False
    for n, word in enumerate(words[1:], 1):
        if skip:
            skip = False
        elif word == "--":
            return n + 1 if command else None
        elif word in _VALUE_FLAGS:
            skip = True
        elif word.startswith(("-", "+")) and len(word) > 1:
            command = command or (not word.startswith("--") and "c" in word)
        else:
            return n if command else None
    return None


def _matches_words(words: Sequence[str], prefix: list[str], depth: int) -> bool:
    """Whether `prefix` matches the simple command `words` (its command word first; see `deny_matches`)."""
    loose = False  # after a wrapper: any later word may be the command
    for i, word in enumerate(words):
        if loose and _ASSIGNMENT.match(word):
            continue  # `env A=$B rm`
        if _UNKNOWN in word:
            return True  # a command word (or a wrapper's argument) that is not a literal
        if _prefix_at(words, i, prefix) or _flags_at(words, i, prefix):
            return True
        base = _basename(word)
        if base == "eval":
            script = " ".join(words[i + 2:] if tuple(words[i + 1:i + 2]) == ("--",) else words[i + 1:])
            return _UNKNOWN in script or deny_matches(script, prefix, depth + 1)
        scripts = _scripts(words[i:]) if base in _EVALUATORS or base == "alias" else []
        scripts += _option_scripts(words[i:])
        if any(_UNKNOWN in s or deny_matches(s, prefix, depth + 1) for s in scripts):
            return True
        if base in _INTERPRETERS and (any(deny_matches(literal, prefix, depth + 1)
                                          for w in words[i + 1:] for literal in _literals(w))
                                      or _spawns(base, _code(base, words[i + 1:]))):
            return True
        if base == "find":
            starts = [n + 1 for n, w in enumerate(words) if n > i and w in _FIND_EXEC]
            if any(n < len(words) and _matches_words(words[n:], prefix, depth + 1) for n in starts):
                return True
        if loose:
            continue
        launched = _launched(words, i)
        if launched is not None:  # `uv run pytest "$f"`, `nohup ./x "$f"`: what runs is a command of its own
            return _matches_words(words[launched:], prefix, depth)
        if base in _WRAPPERS or _launcher(words[i:]):  # `sudo -u x rm`, `docker run img rm`: any later word
            loose = True
            continue
        break
    return False


def _launched(words: Sequence[str], i: int) -> int | None:
    """Where the command a launcher or a wrapper without option values at `words[i]` runs starts (`uv run
    pytest` → `pytest`, `nohup -- ./x` → `./x`), when its words show it; None otherwise (then any later word
    may be the command)."""
    launcher = _launcher(words[i:])
    if launcher is not None:
        start = i + len(launcher) if _LAUNCHERS[launcher] else None
    elif _basename(words[i]) in _PLAIN_WRAPPERS:
        start = i + 1
        while start < len(words) and words[start].startswith("-") and _UNKNOWN not in words[start]:
            start += 1
    else:
        return None
    if (start is None or start >= len(words) or words[start].startswith("-") or _UNKNOWN in words[start]
            or words[start] in _RESERVED):
        return None  # `time { rm; }`: a reserved word the grammar read as a word
    return start


def _launcher(words: Sequence[str]) -> tuple[str, ...] | None:
    """The launcher `words` start with (`("uv", "run")` for `uv run pytest`), or None."""
    for launcher in _LAUNCHERS_BY_NAME.get(_basename(words[0]), ()):
        if tuple(words[1:len(launcher)]) == launcher[1:]:
            return launcher
    return None


def deny_matches(line: str, prefix: list[str], depth: int = 0) -> bool:
    """Whether the deny rule `prefix` (its words) matches any simple command in `line`; when unsure, it does.

    A line is read by one real shell grammar, tree-sitter-bash (the one Codex uses for the same
    decision), never by a lexer of our own: every simple command is found wherever it stands (after a redirection
    `</dev/null rm`, after a comment holding a quote, in a pipeline, a list, a subshell, `{ …; }`, `if`/`for`/
    `while`/`case`, a function body, a command or process substitution, a here-document's body) with its real
    command word. A backslash-newline is removed where sh removes it (outside single quotes, comments and
    here-document text) before the line is read, so `r\\⏎m` is `rm`. Each word is unquoted as sh unquotes it (`\\rm`,
    `'r'm`, `"rm"` are `rm`); a word that holds an expansion (`$X`, `$(…)`, `${…}`, a glob or brace pattern,
    `$'…'` with escapes) is *not a literal*: no rule can judge what it becomes.

    Failing closed: a line the grammar cannot read whole (an ERROR or MISSING node: `<<pytest touch x`, `<>f`; text it
    skips or joins across a blank; a redirection's descriptor it reads as a word (`sh 0< <(…)`); a substitution it
    leaves inside a word or a here-document), or a command whose word is not a literal (`$X -rf v`, `$(echo rm) v`,
    `"$RM"`, `/bin/r?`), a shell or interpreter whose code cannot be seen (`… | sh`, `sh -s < f`, `sh <(…)`, `source
    /dev/stdin`, `xargs sh -c`, `find -exec sh -c {}`), interpreter code that runs a command it builds (`os.system("r" +
    "m")`, `subprocess`, perl's backquotes, awk's pipes), an alias definition or `hash -p` (they rename commands), a
    string holding `$(…)` where bash evaluates strings (`$((x))`, `[[ -eq ]]`, `${x@P}`, `printf -v`), or nesting deeper
    than four scripts, matches every deny rule, no allow rule, and offers no scoped "always". Code a shell or
    interpreter reads from a here-document or here-string the line writes (`python3 - <<'EOF'`, `sh <<'EOF'`) is judged
    as if given with `-c`.

    Deny leans towards matching. A rule matches any simple command of the line, looking past
    assignments (`a=b rm`), wrappers (`env`, `sudo`, `command`, `exec`, `nice`, `time`, `nohup`, `timeout`, `xargs`, …
    with their flags: after one, any later word may be the command), comparing the command word by basename (`/bin/rm`),
    and looking inside scripts given to a shell (`sh -c '…'`, `bash -lc`, `eval …`, read recursively by the same
    grammar), inside strings other commands evaluate (`trap '…' EXIT`, `su -c`, `env -S`, `find -exec … ;`, options
    whose value is a command line: `git -c core.pager=…`, `ssh -o ProxyCommand=…`, `tar --to-command`, `rsync -e`, `make
    --eval`, `vim -c '!…'`; values of variables a shell or program runs: `PS4`, `PROMPT_COMMAND`, `BASH_ENV`, `PAGER`,
    `EDITOR`, `GIT_SSH_COMMAND`, …; the string literals of `perl -e` / `python -c` / `awk` code). When the command word
    matches and an argument is not a literal (`rm $FLAGS x`, `rm *`: a file may be named `-rf`), the rule matches: its
    options cannot be judged. After the command word, options are compared as flags: the rule's flags must be among the
    command's and its other words must appear in the command in order. Combined, split, reordered or trailing short
    flags (`rm -fr`, `rm -r -f`, `rm x -rf`) are the same flags; long options are matched by any prefix (GNU getopt
    accepts an unambiguous one: `rm --rec --for` is `rm -rf`), with or without a value (`--recursive=yes`); common long
    spellings are their short flags (`--recursive` and `--force` are `-r` and `-f`; `--recursive` is `-R` for
    `chmod`/`chown`/`chgrp`; `-R` is `-r` for `rm` and `cp`). Words after `--` are not options.

    Never raises.
    """
    if not prefix:
        return False
    if depth > _MAX_NESTING:
        return True
    reading = _read(line)
    if reading.unreadable:
        return True
    if any(_UNKNOWN in value or deny_matches(value, prefix, depth + 1)
           for c in reading.commands for value in _code_variables(c.words)):
        return True
    return any(_matches_words(c.run, prefix, depth) or _matches_input(c, prefix, depth)
               for c in reading.commands if c.simple and c.run)


# variables whose value a shell or a program runs as a command line, or expands as a prompt (`PS4='$(rm x)'` with
# `set -x`), or whose file it runs as code (`BASH_ENV=<(…)`)
_CODE_VARIABLES = frozenset({"PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "BASH_ENV", "ENV", "PAGER",
                             "MANPAGER", "GIT_PAGER", "EDITOR", "VISUAL", "GIT_EDITOR", "GIT_SSH_COMMAND", "GIT_SSH",
                             "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS", "LESSOPEN", "LESSCLOSE",
                             "SUDO_ASKPASS", "BROWSER", "FCEDIT", "RSYNC_RSH", "CVS_RSH", "TAR_OPTIONS"})


def _code_variables(words: Sequence[str]) -> list[str]:
    """The values `words` give to variables a shell or program runs (`PAGER='rm -rf x' git log`, `export
    PS4=…`, `env GIT_SSH_COMMAND=…`)."""
    return [word.split("=", 1)[1] for word in words
            if "=" in word and word.split("=", 1)[0].rstrip("+") in _CODE_VARIABLES]


def _matches_input(command: _Command, prefix: list[str], depth: int) -> bool:
    """Whether `prefix` matches the code a shell or interpreter of `command` reads from the here-document or
    here-string the line gives it (`sh <<'EOF'`, `python3 - <<'EOF'`)."""
    if command.stdin is None:
        return False
    bases = {_basename(w) for w in command.run}
    if bases & _SHELL_NAMES and deny_matches(command.stdin, prefix, depth + 1):
        return True
    readers = bases & _INTERPRETERS
    return bool(readers) and (any(deny_matches(literal, prefix, depth + 1) for literal in _literals(command.stdin))
                              or any(_spawns(reader, [command.stdin]) for reader in readers))


def _spawns(program: str, code: list[str] | str) -> bool:
    """Whether interpreter code (`_code`) may run a command it builds (`os.system("r" + "m")`): then no rule
    can judge it. A shell's code is read as a script instead."""
    if program in _SHELL_NAMES or not isinstance(code, list):
        return False
    return any(_SPAWNS.search(word) or (program in _AWKS and "|" in word) for word in code)


# --- allow and "always" -------------------------------------------------------------------------------------

def _judged(reading: _Reading) -> bool:
    """Whether allow rules and "always" may approve a line read as `reading` at all."""
    return not (reading.unreadable or reading.substitution or reading.output or reading.evaluation)


def allow_matches(line: str, prefixes: list[list[str]]) -> bool:
    """Whether every simple command of `line` starts, word for word, with one of `prefixes`, and `line`
    has no command substitution, no redirection that writes a file and nothing bash evaluates as code.

    Every simple command (redirections left out: `</dev/null ls` is `ls`)
    must start, word for word, with one of the prefixes (no wrapper, assignment or `sh -c` unless the prefix says
    so; `ls -al` is not `ls -la`), and the line must have no command or process substitution, no redirection that
    writes a file (`2>&1` and `>/dev/null` write none) and nothing bash evaluates as code (arithmetic, `[[ … ]]`,
    `${x[…]}`, `${x@P}`, `${!x}`).

    Never raises."""
    reading = _read(line)
    if not (prefixes and reading.commands and _judged(reading)):
        return False
    return all(any(p and len(c.words) >= len(p) and list(c.words[: len(p)]) == p for p in prefixes)
               for c in reading.commands)


# programs whose first argument names what they do (`git status`, `npm test`): their prefix is two words
_SUBCOMMANDS = frozenset({"git", "npm", "pnpm", "yarn", "bun", "cargo", "go", "uv", "pip", "pip3",
                          "poetry", "make", "docker", "podman", "kubectl", "gh", "dotnet", "mvn", "gradle",
                          "just", "hatch", "pdm", "tox", "nox", "rustup", "deno", "brew", "conda", "pixi", "rye",
                          "bundle", "pipx", "nix", "mamba"})
_MODULE_RUNNERS = frozenset({"python", "python3", "pypy3"})
# launchers: True when the word after them is the program they launch (their scope includes it: `uv run
# pytest`), False when options or an image choose it (no scope stands for them: only the tool-wide "always")
_LAUNCHERS: dict[tuple[str, ...], bool] = {
    **dict.fromkeys([("uv", "run"), ("uv", "tool", "run"), ("uvx",), ("poetry", "run"), ("pdm", "run"),
                     ("hatch", "run"), ("rye", "run"), ("pixi", "run"), ("npm", "exec"), ("npm", "x"), ("npx",),
                     ("npm", "run"), ("npm", "run-script"), ("pnpm", "exec"), ("pnpm", "dlx"), ("pnpm", "run"),
                     ("pnpx",), ("yarn", "exec"), ("yarn", "dlx"), ("yarn", "run"), ("bun", "x"), ("bun", "run"),
                     ("bunx",), ("bundle", "exec"), ("pipx", "run"), ("go", "run"), ("deno", "run"),
                     ("rbenv", "exec"), ("pyenv", "exec"), ("mise", "exec"), ("asdf", "exec")], True),
    **dict.fromkeys([("cargo", "run"), ("docker", "run"), ("docker", "exec"), ("docker", "compose"),
                     ("podman", "run"), ("podman", "exec"), ("kubectl", "exec"), ("kubectl", "run"),
                     ("kubectl", "debug"), ("nix", "run"), ("nix", "shell"), ("nix", "develop"), ("nix-shell",),
                     ("conda", "run"), ("mamba", "run"), ("dotnet", "run"), ("mvn", "exec:exec"),
                     ("mvn", "exec:java"), ("gradle", "run"), ("tox", "exec")],
                    False),
}


_LAUNCHERS_BY_NAME: dict[str, list[tuple[str, ...]]] = {  # the longest first: `uv tool run` before `uv run`
    name: sorted((words for words in _LAUNCHERS if words[0] == name), key=len, reverse=True)
    for name in {words[0] for words in _LAUNCHERS}}


def _prefix_of(words: Sequence[str], depth: int = 0) -> list[str] | None:
    """The prefix an "always" for the command `words` (its command word first) approves, or None."""
    if not words or depth > _MAX_NESTING:
        return None
    first, base = words[0], _basename(words[0])
    if base in _WRAPPERS or base in _SHELLS or base == "alias" or _ASSIGNMENT.match(first) or first.startswith("-"):
        return None
    launcher = _launcher(words)
    if launcher is not None:
        launched = _prefix_of(words[len(launcher):], depth + 1) if _LAUNCHERS[launcher] else None
        return None if launched is None else [*words[:len(launcher)], *launched]
    if base in _MODULE_RUNNERS and list(words[1:2]) == ["-m"] and len(words) > 2:
        prefix = list(words[:3])
    elif base in _SUBCOMMANDS and len(words) > 1:
        prefix = list(words[:2])
    elif base in _INTERPRETERS:
        if len(words) < 2:
            return None
        prefix = list(words[:2])  # the script it runs (`python build.py`), never its code
    else:
        prefix = list(words[:1])
    if any(w.startswith("-") for w in prefix[1:] if w != "-m") or any(_UNKNOWN in w for w in prefix):
        return None
    return prefix


def command_prefixes(line: str) -> list[list[str]] | None:
    """The command prefix each simple command of `line` starts with, as an "always" answer would approve
    it (`pytest -k x` → `[["pytest"]]`; `git status -s && npm test` → `[["git", "status"], ["npm", "test"]]`;
    `python -m pytest` → `[["python", "-m", "pytest"]]`; `uv run pytest -q` → `[["uv", "run", "pytest"]]`),
    duplicates left out; None when no prefix can stand for the line: `allow_matches` would never approve it
    (a substitution, a redirection that writes, what rules cannot judge), or a command is an assignment, a
    declaration, a test, a wrapper, a shell or interpreter code (`sudo`, `sh -c`, `python -c`), a launcher of
    what options choose (`docker run`), or has an option where its subcommand would be (`git -C x`).

    "Always" is scoped to what each command runs: `pytest -k x` → `pytest`, `git status -s`
    → `git status`, `python -m pytest`, `python build.py`; a launcher's scope includes what it launches (`uv run
    pytest -q` → `uv run pytest`, `npx jest`, `bundle exec rake`), and a launcher whose launched program is chosen
    by options or an image (`docker run`, `kubectl exec`, `cargo run`, `nix run`) has none: only the tool-wide
    "always" is offered, as for wrappers, shells, interpreter code, assignments and options where the subcommand
    would be (`git -C x push`).

    Never raises."""
    reading = _read(line)
    if not _judged(reading):
        return None
    prefixes: list[list[str]] = []
    for command in reading.commands:
        prefix = _prefix_of(command.words) if command.simple and not command.assignments else None
        if prefix is None:
            return None
        if prefix not in prefixes:
            prefixes.append(prefix)
    return prefixes or None
