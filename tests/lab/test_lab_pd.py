"""`servewatch lab vllm --pd`'s pair (servewatch/lab/pd.py), checked without an engine: each side's
--kv-transfer-config and environment, and nixl installed only when it does not import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servewatch.lab import pd
from servewatch.lab import recipe as lab_recipe
from servewatch.lab.model_dir import TinyModel
from servewatch.lab.server import _pin_to
from servewatch.lab.venv import LabSetupError, LabVenv


def _lab(tmp_path: Path):
    venv = LabVenv(tmp_path / "venv", reused=True, seconds=0.0)
    fake = lab_recipe.LabRecipe("vllm", "vLLM", lambda cache, progress: venv, False, lab_recipe.VLLM.server_kind,
                                lab_recipe.VLLM.config, lab_recipe.VLLM.processes, False,
                                ensure_model=lambda v, cache: TinyModel(tmp_path / "tiny", {}, reused=True,
                                                                        seconds=0.0))
    return lab_recipe.prepare_lab(fake, tmp_path)


def _config(server, *more: str) -> dict:
    args = server.config.extra_args
    assert args[0] == "--kv-transfer-config" and args[2:] == more
    return json.loads(args[1])


def test_an_example_pair_shares_one_kv_directory_producer_to_consumer(tmp_path):
    pair = pd.pd_pair(_lab(tmp_path), "example", tmp_path / "work", max_num_seqs=4)
    prefill, decode = _config(pair.prefill, "--enforce-eager"), _config(pair.decode, "--enforce-eager")
    assert (prefill["kv_connector"], prefill["kv_role"], decode["kv_role"]) == (
        "ExampleConnector", "kv_producer", "kv_consumer")
    assert prefill["kv_connector_extra_config"] == decode["kv_connector_extra_config"] == {
        "shared_storage_path": str(tmp_path / "work" / "kv-files")}
    assert pair.storage.is_dir() and pair.lease_s is None
    assert pair.prefill.port != pair.decode.port and pair.prefill.config.max_num_seqs == 4
    assert [dict(s.config.extra_env) for s in pair.servers()] == [   # each instance on a core of its own
        {"VLLM_CPU_OMP_THREADS_BIND": "0"}, {"VLLM_CPU_OMP_THREADS_BIND": "1"}]
    assert [s.config.cpus for s in pair.servers()] == [(0,), (1,)]   # its whole tree too, NIXL's threads included


def test_a_pair_on_a_machine_without_the_cores_is_left_unpinned(tmp_path, monkeypatch):
    monkeypatch.setattr(pd.os, "sched_getaffinity", lambda pid: {0})
    pair = pd.pd_pair(_lab(tmp_path), "example", tmp_path / "work")
    assert [s.config.cpus for s in pair.servers()] == [(0,), ()]


def test_a_pinned_servers_process_and_its_children_run_on_its_cores_only(tmp_path):
    # A stand-in "engine" that starts a child and writes both processes' cores: what the lab's Popen gives a tree.
    core = min(os.sched_getaffinity(0))
    script = ("import os, subprocess, sys; print(sorted(os.sched_getaffinity(0)));"
              "print(subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'],"
              " capture_output=True, text=True).stdout.strip())")
    done = subprocess.run([sys.executable, "-c", script], preexec_fn=_pin_to((core,)), capture_output=True, text=True,
                          timeout=30, check=True)
    assert done.stdout.split() == [f"[{core}]", f"[{core}]"]


def test_a_nixl_pair_runs_ucx_over_tcp_with_a_side_channel_each_and_the_lease(tmp_path):
    pair = pd.pd_pair(_lab(tmp_path), "nixl", tmp_path / "work", lease_s=5, prefill_port=4001,
                      extra_args=("--max-num-batched-tokens", "512"))
    for server, role in zip(pair.servers(), ("kv_producer", "kv_consumer")):
        config = _config(server, "--max-num-batched-tokens", "512")
        assert (config["kv_connector"], config["kv_role"], config["kv_buffer_device"]) == ("NixlConnector", role, "cpu")
        assert config["kv_connector_extra_config"] == {"kv_lease_duration": 5, "num_threads": 1}
        env = dict(server.config.extra_env)
        assert server.environment()["VLLM_CPU_OMP_THREADS_BIND"] == ("0" if role == "kv_producer" else "1")
        assert (env["UCX_TLS"], env["VLLM_NIXL_SIDE_CHANNEL_HOST"]) == ("tcp,self", "127.0.0.1")
        assert server.environment()["UCX_TLS"] == "tcp,self"
    ports = [dict(s.config.extra_env)["VLLM_NIXL_SIDE_CHANNEL_PORT"] for s in pair.servers()]
    assert ports[0] != ports[1]
    assert pair.prefill.port == 4001 and pair.lease_s == 5 and pair.storage is None
    assert pair.prefill.log_path.name == "vllm-prefill-4001.log"


def test_the_side_channels_lie_below_the_kernels_ephemeral_range_apart_from_every_http_port(tmp_path, monkeypatch):
    # A side channel picked by bind(0) lay inside the ephemeral range, free for minutes until vLLM bound it after
    # loading the model: any bind(0) or connect() of the other instance's start could take it meanwhile.
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t60999\n")
    monkeypatch.setattr(pd, "EPHEMERAL_RANGE_FILE", ranges)
    for _ in range(20):
        pair = pd.pd_pair(_lab(tmp_path), "nixl", tmp_path / "work")
        env = {role: dict(s.config.extra_env) for role, s in zip(("prefill", "decode"), pair.servers())}
        channels = {role: int(e["VLLM_NIXL_SIDE_CHANNEL_PORT"]) for role, e in env.items()}
        assert pair.side_channels == channels
        assert channels["prefill"] != channels["decode"]
        assert all(pd.SIDE_CHANNEL_FLOOR <= port < 40000 for port in channels.values()), channels
        assert not set(channels.values()) & {pair.prefill.port, pair.decode.port}
    assert pd.pd_pair(_lab(tmp_path), "example", tmp_path / "work").side_channels == {}
    ranges.write_text("not a range")
    assert pd.ephemeral_low(ranges) == 32768 and pd.ephemeral_low(tmp_path / "absent") == 32768


def test_a_side_channel_port_in_use_is_passed_over(monkeypatch):
    import socket

    # below the ephemeral range, where no connection of another test takes the next port meanwhile
    busy = pd.side_channel_ports(1)[0]
    held = socket.socket()
    held.bind(("127.0.0.1", busy))
    held.listen()
    try:
        # the range is the held port and the next one: only the next one can be given, and never two
        monkeypatch.setattr(pd, "SIDE_CHANNEL_FLOOR", busy)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", busy + 1))
            except OSError:
                pytest.skip(f"port {busy + 1} is in use here")
        assert pd.side_channel_ports(1, low=busy + 2) == (busy + 1,)
        with pytest.raises(LabSetupError, match=f"no 2 free ports on 127.0.0.1 between {busy} and {busy + 1}"):
            pd.side_channel_ports(2, low=busy + 2)
        with pytest.raises(LabSetupError):
            pd.side_channel_ports(1, low=busy + 2, avoid=(busy + 1,))
    finally:
        held.close()


def test_a_ready_pair_names_the_side_whose_side_channel_does_not_listen(tmp_path):
    import socket

    pair = pd.pd_pair(_lab(tmp_path), "nixl", tmp_path / "work")
    with socket.socket() as listening, socket.socket() as bound_only:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        bound_only.bind(("127.0.0.1", 0))        # bound, not listening: a connection is refused
        pair.side_channels = {"prefill": bound_only.getsockname()[1], "decode": listening.getsockname()[1]}
        assert pair.silent_side_channels() == [f"prefill (127.0.0.1:{bound_only.getsockname()[1]})"]
        pair.side_channels = {"prefill": listening.getsockname()[1], "decode": listening.getsockname()[1]}
        assert pair.silent_side_channels() == []


def test_an_unknown_connector_is_refused(tmp_path):
    with pytest.raises(ValueError, match="mooncake"):
        pd.pd_pair(_lab(tmp_path), "mooncake", tmp_path)


def _venv_with(tmp_path: Path, script: str) -> LabVenv:
    """A stand-in venv whose python is a shell script: it records each call and runs `script` (never a real pip)."""
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'calls'}\n{script}\n")
    python.chmod(0o755)
    return LabVenv(root, reused=True, seconds=0.0)


def _nixl_venv(tmp_path: Path, backend: str | None, pip_exit: int = 0) -> LabVenv:
    """A stand-in venv whose `import nixl` takes `backend` (None: no nixl) until pip installs nixl_cu12."""
    state = tmp_path / "backend"
    if backend:
        state.write_text(backend)
    return _venv_with(tmp_path, f'case "$1 $3" in\n'
                                f'  "-m install") [ {pip_exit} = 0 ] && echo nixl_cu12 > {state}; exit {pip_exit};;\n'
                                f'  "-m uninstall") rm -f {state}; exit 0;;\n'
                                f'esac\n[ -e {state} ] && cat {state}')


def _calls(tmp_path: Path) -> list[str]:
    return [line.split(" ", 1)[0] + " " + line.split(" ", 3)[2] if line.startswith("-m") else "probe"
            for line in (tmp_path / "calls").read_text().splitlines()]


def test_nixl_on_its_cuda12_backend_is_not_installed_again(tmp_path):
    assert pd.ensure_nixl(_nixl_venv(tmp_path, "nixl_cu12")).installed is False
    assert _calls(tmp_path) == ["probe"]


def test_nixl_is_installed_without_dependencies_on_its_cuda12_backend_when_missing(tmp_path):
    said: list[str] = []
    assert pd.ensure_nixl(_nixl_venv(tmp_path, None), say=said.append).installed is True
    assert (tmp_path / "calls").read_text().splitlines()[1] == f"-m pip install --no-deps {pd.NIXL_PIN} nixl-cu12==1.5.1"
    assert _calls(tmp_path) == ["probe", "-m install", "probe"]
    assert pd.NIXL_PIN in said[0] and "removing" not in said[0]


def test_nixl_on_its_cuda13_backend_has_that_backend_removed_first(tmp_path):
    # nixl 1.5.1 with no CUDA takes nixl_cu13 when installed; the pair was measured on nixl_cu12
    said: list[str] = []
    assert pd.ensure_nixl(_nixl_venv(tmp_path, "nixl_cu13"), say=said.append).installed is True
    assert (tmp_path / "calls").read_text().splitlines()[1] == "-m pip uninstall -y nixl-cu13"
    assert _calls(tmp_path) == ["probe", "-m uninstall", "-m install", "probe"]
    assert "removing the nixl_cu13 backend (the pair was measured on nixl_cu12)" in said[0]


def test_a_failed_nixl_install_names_the_step_and_the_log(tmp_path):
    with pytest.raises(LabSetupError, match=r"pip install --no-deps nixl==1\.5\.1 nixl-cu12==1\.5\.1 failed with exit "
                                            r"code 1 \(see .*nixl\.install\.log\)"):
        pd.ensure_nixl(_nixl_venv(tmp_path, None, pip_exit=1))


def test_the_pair_is_shaken_hands_until_decode_answers_from_the_transfer(tmp_path):
    pair = pd.pd_pair(_lab(tmp_path), "nixl", tmp_path / "work")
    sent = []
    decode_answers = iter([(500, {"error": "handshake_failed"}), (200, {"choices": []})])

    def post(url, body, timeout_s):
        sent.append((url, body["kv_transfer_params"], timeout_s))
        if url == pair.prefill.url:
            return 200, {"kv_transfer_params": {"remote_port": 1, "do_remote_prefill": True}}
        return next(decode_answers)

    assert pair.shake_hands(post=post) == 2
    assert [url for url, _, _ in sent] == [pair.prefill.url, pair.decode.url] * 2
    assert sent[0][1] == pd.PREFILL_PARAMS and sent[1][1] == {"remote_port": 1, "do_remote_prefill": True}
    assert sent[0][2] == pd.HANDSHAKE_LEG_S

    def refused(url, body, timeout_s):
        return (200, {"id": "x"}) if url == pair.prefill.url else (500, None)

    with pytest.raises(LabSetupError, match=r"no prompt handed over from prefill to decode in 3 tries \(prefill "
                                            r"answered 200 without kv_transfer_params; logs: .*vllm-prefill-"):
        pair.shake_hands(post=refused)
    with pytest.raises(LabSetupError, match=r"in 2 tries \(decode answered nothing"):
        pair.shake_hands(attempts=2, post=lambda url, body, t: (
            (200, {"kv_transfer_params": {"a": 1}}) if url == pair.prefill.url else (None, None)))


def test_every_lab_vllm_process_asks_for_amx_tiles_first(tmp_path):
    # vLLM 0.32's CPU attention died of SIGILL on an AMX Xeon in a process that never asked for AMX (2026-12-07):
    # the lab's engines start with amx/sitecustomize.py on their path, ahead of the user's own PYTHONPATH.
    from servewatch.lab.server import AMX_GRANT_DIR

    pair = pd.pd_pair(_lab(tmp_path), "nixl", tmp_path / "work")
    path = pair.decode.environment()["PYTHONPATH"].split(os.pathsep)
    assert path[0] == str(AMX_GRANT_DIR) and (AMX_GRANT_DIR / "sitecustomize.py").is_file()
    # the permitted features (ARCH_GET_XCOMP_PERM) hold AMX tile data (bit 18) from the start, where the CPU has AMX
    probe = ("import ctypes, sys; mask = ctypes.c_uint64(); "
             "ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(mask)); "
             "print(sys.modules['sitecustomize'].__file__.startswith(sys.argv[1]), bool(mask.value >> 18 & 1))")
    done = subprocess.run([sys.executable, "-c", probe, str(AMX_GRANT_DIR)], env={"PYTHONPATH": path[0]},
                          capture_output=True, text=True, timeout=30, check=True)
    has_amx = " amx_tile " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    assert done.stdout.split() == ["True", str(has_amx)] and done.stderr == ""
