"""Matching shell command lines against `NAME:PREFIX` approval rules. Pure: no I/O, no tool names.

A command line is split the way a POSIX shell reads it, quote-aware: `;`, `&`, `|`, `&&`, `||`, `(`,
`)`, a newline, a backtick, `$(`, `<(` and `>(` end a simple command unless quoted or escaped; each word
is then unquoted with `shlex`. `echo "a; b"` is one command, `echo a; b` two.

**Deny** (`deny_matches`) leans towards matching. A rule matches any simple command of the line (`cd x &&
rm -rf y`), skipping leading `VAR=value` words and shell keywords (`if`, `then`, `do`, `{`, `!` ...),
looking past wrappers (`env`, `sudo`, `xargs`, `nice`, `time`, `exec`, ... with their flags), comparing
the command word by basename (`/bin/rm`), and looking inside scripts given to a shell (`sh -c '...'`,
`bash -c`, `eval`), inside strings other commands evaluate (`trap '...' EXIT`, `su -c`, `env -S`, `find
-exec ... ;`, the string literals of `perl -e` / `python -c` / `awk` code) and inside command
substitutions, quoted or not (`echo "$(rm -rf x)"`). What cannot be read fails closed: a command word that
is not a literal (`$CMD`, `$(echo rm)`, a backtick) or a shell or interpreter reading its code from a pipe
(`echo rm -rf x | sh`) matches every deny rule. After the command word, options are compared as flags: the
rule's flags must be among the command's and its other words must appear in the command in order.
Combined, split, reordered or trailing short flags (`rm -fr`, `rm -r -f`, `rm x -rf`) are the same flags;
long options are matched by any prefix (GNU getopt accepts an unambiguous one: `rm --rec --for` is `rm
-rf`), with or without a value (`--recursive=yes`); common long spellings are their short flags
(`--recursive` and `--force` are `-r` and `-f`; `--recursive` is `-R` for `chmod`/`chown`/`chgrp`; `-R` is
`-r` for `rm` and `cp`). Words after `--` are not options.

**Allow** (`allow_matches`) is strict: every simple command must start, word for word, with one of
the prefixes (no wrapper, assignment or `sh -c` unless the prefix says so; `ls -al` is not `ls -la`),
and the line must have no command substitution (`$(`, backtick) and no output redirection.

Rules are guard rails, not a sandbox: a command spelled through aliases or functions, or the same
effect by another program (`find -delete`, `shutil.rmtree`), is not recognised.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

__all__ = ["allow_matches", "command_prefixes", "deny_matches", "rule_words", "split_commands"]

_OPERATOR_CHARS = frozenset(";&|()<>\n`")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_KEYWORDS = frozenset({"{", "}", "(", ")", "!", "if", "then", "else", "elif", "fi", "do", "done", "while",
                       "until", "for", "in", "case", "esac", "select", "coproc"})
# words that run the rest of their arguments as a command (after flags and their values)
_WRAPPERS = frozenset({"time", "exec", "command", "builtin", "env", "nohup", "nice", "ionice", "sudo", "doas",
                       "xargs", "timeout", "setsid", "stdbuf", "chrt", "taskset", "flock", "watch", "strace",
                       "unbuffer", "chroot", "runuser", "su", "parallel", "function", "busybox",
                       # debuggers, tracers, namespaces, fake roots, remote shells: they run their arguments
                       "fakeroot", "unshare", "nsenter", "gdb", "lldb", "valgrind", "ltrace", "catchsegv", "ssh",
                       "proot", "firejail", "bwrap", "systemd-run", "setpriv", "capsh", "pkexec", "sg", "faketime",
                       "torsocks", "tsocks", "proxychains", "proxychains4", "rlwrap", "xvfb-run", "dbus-launch",
                       "dbus-run-session", "eatmydata", "nocache", "chronic", "caffeinate", "sandbox-exec"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "fish", "eval"})
# words whose later arguments may be a script they evaluate (`trap 'CMD' EXIT`, `su -c 'CMD'`, `env -S 'CMD'`)
_EVALUATORS = _SHELLS | {"trap", "su", "runuser", "env", "watch", "parallel", "flock", "ssh", "script", "sg"}
# programs that read code from standard input when given no script argument (`… | sh`)
_STDIN_CODE = (_SHELLS - {"eval"}) | {"python", "python2", "python3", "perl", "ruby", "node", "php", "lua", "tclsh"}
# interpreters whose code can run a command through a string (`os.system("…")`, `system("…")`)
_INTERPRETERS = _STDIN_CODE | {"awk", "gawk", "mawk", "nawk", "pypy", "pypy3", "deno", "bun"}
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_STRING_LITERAL = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'")
_MAX_NESTING = 4

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


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
    operator: bool
    """An unquoted control or redirection operator (`;`, `&&`, `|`, `(`, `2>`, `$(` ...)."""


def _tokens(line: str) -> list[_Token]:
    """Words (still quoted) and operators of `line`, split where a POSIX shell would split them."""
    out: list[_Token] = []
    word: list[str] = []
    quote = ""
    i = 0

    def flush() -> None:
        if word:
            out.append(_Token("".join(word), False))
            word.clear()

    while i < len(line):
        c = line[i]
        if quote == "'":
            word.append(c)
            quote = "" if c == "'" else quote
        elif c == "\\" and i + 1 < len(line):
            word.append(line[i: i + 2])
            i += 1
        elif quote == '"':
            word.append(c)
            quote = "" if c == '"' else quote
        elif c in "'\"":
            word.append(c)
            quote = c
        elif c == "$" and line[i + 1: i + 2] == "(":
            flush()
            out.append(_Token("$(", True))
            i += 1
        elif c in _OPERATOR_CHARS:
            flush()
            j = i
            while j < len(line) and line[j] in _OPERATOR_CHARS and line[j] != "\n":
                j += 1
            out.append(_Token(line[i: max(j, i + 1)], True))
            i = max(j, i + 1) - 1
        elif c in " \t\r":
            flush()
        else:
            word.append(c)
        i += 1
    flush()
    return out


def _unquote(word: str) -> str:
    try:
        parts = shlex.split(word)
    except ValueError:  # an unbalanced quote: the text without its quote marks
        return word.replace("'", "").replace('"', "")
    return " ".join(parts) if parts else ""


def split_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell command line, each as its unquoted words (empty ones left out).

    `2>&1` joins streams and separates nothing; a redirection's target stays a word of its command.
    """
    commands: list[list[str]] = []
    current: list[str] = []
    for token in _tokens(line):
        if (token.operator and not (set(token.text) & set("<>"))) or token.text in ("<(", ">("):
            if current:
                commands.append(current)
            current = []
        elif not token.operator:
            current.append(_unquote(token.text))
    if current:
        commands.append(current)
    return commands


def _has_output_redirect(line: str) -> bool:
    tokens = _tokens(line)
    for n, token in enumerate(tokens):
        if token.operator and ">" in token.text and token.text != ">(":
            target = tokens[n + 1].text if n + 1 < len(tokens) else ""
            if not (token.text.endswith(">&") and target.isdigit()):  # `2>&1`, `>&2`: a descriptor, no file
                return True
    return False


def rule_words(prefix: str) -> list[str]:
    """The words of a rule's command prefix (`"git  status"` → `["git", "status"]`); [] when it has none."""
    try:
        return shlex.split(prefix)
    except ValueError:  # unbalanced quotes: compare plain words
        return prefix.split()


def _basename(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1] or word


def _prefix_at(words: list[str], i: int, prefix: list[str]) -> bool:
    """`prefix` at `words[i:]`, the command word compared by basename (`/bin/rm` is `rm`)."""
    head = words[i: i + len(prefix)]
    return (len(head) == len(prefix) and _basename(head[0]) == _basename(prefix[0])
            and head[1:] == prefix[1:])


def _options(words: list[str], command: str, known: tuple[str, ...]) -> tuple[set[str], list[str]]:
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


def _flags_at(words: list[str], i: int, prefix: list[str]) -> bool:
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


def _substitutions(words: list[str]) -> list[str]:
    """Words holding a command substitution (`"$(...)"`, backticks), even quoted: matched as scripts."""
    return [w for w in words if "$(" in w or "`" in w]


_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"|\\.")
_BRACES = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")


def _is_pattern(word: str) -> bool:
    """Whether the (still quoted) word is a glob or brace expansion the shell rewrites (`r?`, `r[m]`,
    `{rm,-rf,x}`): as a command word, what runs cannot be read from it. `[` and `[[` are commands."""
    bare = _QUOTED.sub("x", word)
    return bare not in ("[", "[[") and (any(c in bare for c in "*?[") or _BRACES.search(bare) is not None)


def _unreadable(line: str) -> bool:
    """Whether `line` runs something a rule cannot read: a command word that is not a literal (`$CMD`,
    `$(echo rm)`, a backtick, a glob or brace expansion), or a shell or interpreter reading its code from
    a pipe (`… | sh`) or a redirection (`sh < script`, a here-document or here-string)."""
    expect = True  # the next word is in command position
    after_pipe = False
    reader: str | None = None  # a program after a pipe that may read code from it, until an argument shows
    skip = False  # the next word is a redirection's target
    assigning = False  # the last word was `NAME=` (its value may be a substitution)
    backticks = 0
    code_reader = False  # this simple command is a shell or interpreter given no script argument (yet)
    stdin_redirected = False  # this simple command's standard input comes from a redirection
    for token in _tokens(line):
        if token.operator:
            text = token.text
            if "<" in text and text not in ("<(",) and not text.startswith(">"):
                stdin_redirected = True
            elif (not set(text) & set("<>") or text in ("<(", ">(")) and code_reader and stdin_redirected:
                return True  # the end of `sh < script`: its code came from the redirection
            if not set(text) & set("<>") or text in ("<(", ">("):
                code_reader = stdin_redirected = False
            if text in ("$(", "`"):
                opening = text == "$(" or backticks % 2 == 0
                if text == "`":
                    backticks += 1
                if opening:
                    if expect and not assigning:
                        return True
                    expect, after_pipe = True, False
                else:
                    expect = False
            elif set(text) & set("<>") and text not in ("<(", ">("):
                skip = not text.endswith("&")
            elif text == ")":
                expect = False
            else:
                if reader is not None:
                    return True
                expect, after_pipe = True, text in ("|", "|&")
            assigning = False
            continue
        word = token.text
        assigning = False
        if skip:
            skip = False
            continue
        if reader is not None and not word.startswith("-"):
            reader = None  # a script file or argument: its code is not read from the pipe
        if not expect:
            if not word.startswith("-"):
                code_reader = False  # a script file or argument
            continue
        if _ASSIGNMENT.match(word):
            assigning = word.endswith("=")
            continue
        if word in _KEYWORDS:
            expect = word not in ("case", "for", "select", "in")
            continue
        if ("$" in word and not word.startswith("'")) or _is_pattern(word):
            return True
        base = _basename(_unquote(word))
        if base in _WRAPPERS:
            continue
        expect = False
        code_reader = base in _STDIN_CODE
        if after_pipe and base in _STDIN_CODE:
            reader = base
    return reader is not None or (code_reader and stdin_redirected)


def _literals(word: str) -> list[str]:
    """The string literals in an interpreter's code (`os.system("rm -rf x")` → `rm -rf x`), and all of
    them joined (`["rm", "-rf", "x"]` → `rm -rf x`)."""
    found = [a or b for a, b in _STRING_LITERAL.findall(word)]
    return [*found, " ".join(found)] if len(found) > 1 else found


def _scripts(words: list[str]) -> list[str]:
    """The arguments of an evaluator `words[0]` that may be a script: those holding a space or an operator,
    and the one after a `-c`-like flag (`sh -c "$CMD"`, `su -c`, `env -S`)."""
    return [w for n, w in enumerate(words[1:], 1)
            if re.search(r"[\s;&|()<>`]|\$\(", w) or re.fullmatch(r"-[A-Za-z]*c|-S|--split-string|--command",
                                                                  words[n - 1])]


def _matches_words(words: list[str], prefix: list[str], depth: int) -> bool:
    """Whether `prefix` matches the simple command `words` (see `deny_matches`)."""
    loose = False  # after a wrapper: any later word may be the command
    for i, word in enumerate(words):
        if _prefix_at(words, i, prefix) or _flags_at(words, i, prefix):
            return True
        base = _basename(word)
        # we only get here at a command position; `eval` evaluates all its words
        scripts = words[i + 1:] if base == "eval" else _scripts(words[i:]) if base in _EVALUATORS else []
        if any(deny_matches(s, prefix, depth + 1) for s in scripts) or (
                base == "eval" and deny_matches(" ".join(scripts), prefix, depth + 1)):
            return True
        if base in _INTERPRETERS and any(deny_matches(literal, prefix, depth + 1)
                                         for w in words[i + 1:] for literal in _literals(w)):
            return True
        if base == "find":
            starts = [n + 1 for n, w in enumerate(words) if n > i and w in _FIND_EXEC]
            if any(_matches_words(words[n:], prefix, depth + 1) for n in starts):
                return True
        if loose or _ASSIGNMENT.match(word) or word in _KEYWORDS:
            continue
        if base in _WRAPPERS:
            loose = True
            continue
        break
    return False


def deny_matches(line: str, prefix: list[str], depth: int = 0) -> bool:
    """Whether the deny rule `prefix` (its words) matches any simple command in `line`; when unsure, it does.

    See the module docstring for what "matches" covers. Never raises.
    """
    if not prefix:
        return False
    if depth > _MAX_NESTING or _unreadable(line):
        return True
    for words in split_commands(line):
        if any(deny_matches(s, prefix, depth + 1) for s in _substitutions(words)):
            return True
        if _matches_words(words, prefix, depth):
            return True
    return False


def allow_matches(line: str, prefixes: list[list[str]]) -> bool:
    """Whether every simple command of `line` starts, word for word, with one of `prefixes`, and `line`
    has no command substitution and no output redirection. Never raises."""
    if "$(" in line or "`" in line or _has_output_redirect(line):
        return False
    commands = split_commands(line)
    return bool(prefixes and commands) and all(
        any(p and c[: len(p)] == p for p in prefixes) for c in commands)


# programs whose first argument names what they do (`git status`, `npm test`): their prefix is two words
_SUBCOMMANDS = frozenset({"git", "npm", "npx", "pnpm", "yarn", "bun", "cargo", "go", "uv", "uvx", "pip", "pip3",
                          "poetry", "make", "docker", "podman", "kubectl", "gh", "dotnet", "mvn", "gradle",
                          "just", "hatch", "pdm", "tox", "nox", "rustup", "deno", "brew", "conda"})
_MODULE_RUNNERS = frozenset({"python", "python3", "pypy3"})


def command_prefixes(line: str) -> list[list[str]] | None:
    """The command prefix each simple command of `line` starts with, as an "always" answer would approve
    it (`pytest -k x` → `[["pytest"]]`; `git status -s && npm test` → `[["git", "status"], ["npm", "test"]]`;
    `python -m pytest` → `[["python", "-m", "pytest"]]`), duplicates left out; None when no prefix can
    stand for the line: it has a command substitution or an output redirection (`allow_matches` never
    approves it), or a command starts with an assignment, a keyword, a wrapper, a shell or interpreter
    code (`sudo`, `sh -c`, `python -c`), or an option where its subcommand would be (`git -C x`).
    Never raises."""
    if "$(" in line or "`" in line or _has_output_redirect(line) or _unreadable(line):
        return None
    prefixes: list[list[str]] = []
    for words in split_commands(line):
        first = words[0]
        base = _basename(first)
        if _ASSIGNMENT.match(first) or first in _KEYWORDS or base in _WRAPPERS or base in _SHELLS:
            return None
        if base in _MODULE_RUNNERS and words[1:2] == ["-m"] and len(words) > 2:
            prefix = words[:3]
        elif base in _SUBCOMMANDS and len(words) > 1:
            prefix = words[:2]
        elif base in _INTERPRETERS:
            if len(words) < 2:
                return None
            prefix = words[:2]  # the script it runs (`python build.py`), never its code
        else:
            prefix = words[:1]
        if any(w.startswith("-") for w in prefix[1:] if w != "-m"):
            return None
        if prefix not in prefixes:
            prefixes.append(prefix)
    return prefixes or None
