"""The lab llama.cpp without the real build: ensure_build on a small CMake tree standing in for llama.cpp's (the
configure flags it passes, cmake's percentage lines said as progress, the marker, the reuse), the server's command,
and the drill's test-only hang hook for a program that is not Python (LD_PRELOAD): only the main thread sleeps."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from tests.tools import needs_tool

from servewatch.drill import hang_hook
from servewatch.lab import llamacpp
from servewatch.lab.recipe import LLAMACPP, RECIPES

STAND_IN_CMAKE = """cmake_minimum_required(VERSION 3.14)
project(standin C)
message(STATUS "stand-in: UI=${LLAMA_USE_PREBUILT_UI} TESTS=${LLAMA_BUILD_TESTS} NATIVE=${GGML_NATIVE}")
add_library(part1 STATIC part1.c)
add_library(part2 STATIC part2.c)
add_executable(llama-server main.c)
target_link_libraries(llama-server part1 part2)
set_target_properties(llama-server PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(not-wanted other.c)
"""
STAND_IN_MAIN = """#include <stdio.h>
int part1(void); int part2(void);
int main(int argc, char ** argv) {
    fprintf(stderr, "load_backend: loaded CPU backend\\nversion: %d (stand-in)\\nbuilt with cc for x86_64\\n",
            part1() + part2());
    return 0;
}
"""


def _stand_in_tree(cache: Path) -> Path:
    source = llamacpp.build_root(cache) / "sdist" / "llama.cpp"
    source.mkdir(parents=True)
    (source / "CMakeLists.txt").write_text(STAND_IN_CMAKE)
    (source / "main.c").write_text(STAND_IN_MAIN)
    (source / "part1.c").write_text("int part1(void) { return 40; }\n")
    (source / "part2.c").write_text("int part2(void) { return 2; }\n")
    (source / "other.c").write_text("#error this target is never built\n")
    return source


@needs_tool("cmake", "cc")
def test_the_build_passes_the_flags_says_its_progress_and_is_reused(tmp_path):
    _stand_in_tree(tmp_path)
    said: list[str] = []
    built = llamacpp.ensure_build(tmp_path, progress=said.append)

    assert not built.reused
    assert built.binary == tmp_path / f"llamacpp-{llamacpp.LLAMACPP_BIN_VERSION}" / "build" / "bin" / "llama-server"
    log = (tmp_path / f"llamacpp-{llamacpp.LLAMACPP_BIN_VERSION}.build.log").read_text()
    assert "stand-in: UI=OFF TESTS=OFF NATIVE=OFF" in log            # the web UI is never downloaded
    assert "--target llama-server -j2" in log and log.count("$ nice -n 10 cmake") == 2
    assert not list((tmp_path / f"llamacpp-{llamacpp.LLAMACPP_BIN_VERSION}" / "build").rglob("not-wanted"))
    assert said[0].startswith("building llama-server from ")
    progress = [line for line in said if line.startswith("  build ")]
    assert progress[-1] == "  build 100%: Linking C executable bin/llama-server"
    percents = [int(line.split()[1].rstrip("%:")) for line in progress]
    assert len(percents) >= 3 and percents == sorted(percents)          # one line per tenth of the way at most
    marker = json.loads((built.root / ".servewatch-lab-ready").read_text())
    assert marker["server_version"] == "version: 42 (stand-in); built with cc for x86_64"
    assert marker["binary_bytes"] == built.binary.stat().st_size > 0
    assert marker["bin_bytes"] == marker["binary_bytes"]           # no shared library beside it in the stand-in
    assert marker["flags"] == list(llamacpp.CMAKE_FLAGS) and marker["build_seconds"] > 0

    said.clear()
    again = llamacpp.ensure_build(tmp_path, progress=said.append)
    assert again.reused and again.info == marker and said == []
    assert (tmp_path / f"llamacpp-{llamacpp.LLAMACPP_BIN_VERSION}.build.log").read_text() == log   # nothing ran


@needs_tool("cmake", "cc")
def test_a_failed_build_says_which_step_and_leaves_no_marker(tmp_path):
    source = _stand_in_tree(tmp_path)
    (source / "part2.c").write_text("this is not C\n")
    with pytest.raises(llamacpp.LabSetupError, match=r"^cmake's build failed with exit code 2 \(see .*build\.log\)$"):
        llamacpp.ensure_build(tmp_path)
    assert llamacpp.build_info(tmp_path) is None


def test_the_server_command_turns_metrics_and_slots_on_and_the_recipe_is_registered(tmp_path):
    config = llamacpp.LlamacppConfig(model_path=tmp_path / "m.gguf", binary=tmp_path / "llama-server",
                                     context_length=1024, parallel=3)
    command = llamacpp.llamacpp_command(config, 8123)
    assert command == [str(tmp_path / "llama-server"), "-m", str(tmp_path / "m.gguf"), "--host", "127.0.0.1",
                       "--port", "8123", "-c", "3072", "-np", "3", "-t", "2", "--metrics", "--slots",
                       "--alias", "tiny"]
    assert RECIPES["llamacpp"] is LLAMACPP and LLAMACPP.server_kind is llamacpp.LlamacppServer


TICKER = r"""#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static void tick(char c) { struct timespec t = {0, 20000000}; for (;;) { write(1, &c, 1); nanosleep(&t, NULL); } }
static void * other(void * unused) { tick('o'); return NULL; }
int main(void) { pthread_t t; pthread_create(&t, NULL, other, NULL); tick('m'); }
"""


@needs_tool("cc")
def test_the_native_hang_hook_blocks_the_main_thread_alone(tmp_path):
    """The hook preloaded in a C program whose main thread and second thread each write a letter every 20 ms:
    after the signal the main thread's letters stop (for the hold) while the other's go on; removing the
    request ends the hang within the hook's 0.2 s nap."""
    (tmp_path / "ticker.c").write_text(TICKER)
    subprocess.run(["cc", "-pthread", "-o", str(tmp_path / "ticker"), str(tmp_path / "ticker.c")], check=True)
    env = {**os.environ, **hang_hook.environment(tmp_path / "hang", native=True)}
    proc = subprocess.Popen([str(tmp_path / "ticker")], stdout=subprocess.PIPE, env=env)
    seen: list[tuple[float, str]] = []

    def read() -> None:
        while letter := proc.stdout.read(1):
            seen.append((time.monotonic(), letter.decode()))

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + 10
        while not ({"m", "o"} <= {c for _, c in seen}) and time.monotonic() < deadline:
            time.sleep(0.02)     # waiting for the program's first letters (no event to wait on)
        assert hang_hook.catches(proc.pid)
        request = hang_hook.request(tmp_path / "hang", proc.pid, 20)
        os.kill(proc.pid, hang_hook.HANG_SIGNAL)
        sent = time.monotonic()
        while time.monotonic() < sent + 1.5:
            time.sleep(0.05)
        during = [c for t, c in seen if sent + 0.3 <= t <= sent + 1.5]
        assert during.count("m") == 0 and during.count("o") >= 20, during
        hang_hook.release(request)
        released = time.monotonic()
        while not any(c == "m" and t > released for t, c in seen) and time.monotonic() < released + 5:
            time.sleep(0.02)
        resumed = next(t for t, c in seen if c == "m" and t > released) - released
        assert resumed < 0.2 + 0.5, resumed      # the hook's nap, and a shared machine's delay
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait(5)


def test_the_shipped_llamacpp_plan_is_the_conformance_one_and_every_fault_states_what_must_happen():
    from servewatch.drill.plan import load_plan, shipped_path

    shipped = shipped_path("standard", "llamacpp")
    assert (Path(__file__).parent / "conformance" / "plans" / "standard-llamacpp.yaml").resolve() == shipped.resolve()
    plan = load_plan(shipped)
    assert plan.target.engine == "llamacpp" and len(plan.steps) == 10
    assert {s.kind for s in plan.steps} >= {"hang", "stop", "kill", "overload", "slow_net", "client_abort", "restart"}
    assert all(s.expect.to_json() for s in plan.steps)
    assert sum(1 for s in plan.steps if s.kind == "hang" and "guard" in s.expect.to_json()) == 2   # idle, under load
    idle_hang = next(s for s in plan.steps if s.kind == "hang" and s.params.get("idle"))
    assert idle_hang.expect.to_json()["fire"] == {"not_serving": 16} and idle_hang.expect.to_json()["guard"]["kills"]
