"""`servewatch advise`: capacity, alarm thresholds and histogram edges derived from the model and the
hardware, with the arithmetic shown; `--against URL` checks them against a live server."""

from __future__ import annotations

import argparse

from servewatch.table import WIDE_HELP

HELP = "derive capacity, alarm thresholds and histogram edges from the model and the GPU"
DESCRIPTION = ("Derive, with the arithmetic shown: KV bytes per token, weight bytes streamed per decode "
               "step, the KV pool in token slots, one maximum-length request's share, the KV alarm that "
               "leaves room for N admissions, the decode floor, the logits-sized temporary at the slot "
               "limit, and histogram edges for ITL, TTFT and e2e placed around them — emitted as vLLM's "
               "--custom-histogram-buckets value and SGLang's --bucket-* flags. With --against, compare "
               "with what a live server reports.")

MAX_LOG_BYTES = 8 * 2**20       # the startup lines are at the head of the log
METRICS_TIMEOUT_S = 10.0
METRICS_MAX_BYTES = 16 * 2**20


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="DIR_OR_CONFIG",
                        help="a model directory (config.json; *.safetensors headers give exact weight bytes) "
                             "or a config.json")
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument("--gpu", metavar="NAME", help="a GPU from the table (H100, H200, A100, A10G, L4)")
    hardware.add_argument("--gpu-memory", metavar="BYTES",
                          help="memory per GPU, e.g. 81559MiB or 80GB (overrides the table)")
    hardware.add_argument("--bandwidth", metavar="B/s", help="memory bandwidth per GPU, e.g. 3.35TB/s")
    serving = parser.add_argument_group("serving configuration")
    serving.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel size (default 1)")
    serving.add_argument("--max-model-len", type=int, metavar="L",
                         help="tokens per request (default: the model's max_position_embeddings)")
    serving.add_argument("--max-num-seqs", type=int, default=256, metavar="S",
                         help="slot limit: vLLM --max-num-seqs, SGLang --max-running-requests (default 256)")
    serving.add_argument("--gpu-memory-utilization", default="0.92", metavar="U",
                         help="the engine's share of GPU memory (default 0.92, vLLM's)")
    serving.add_argument("--kv-cache-dtype", default="auto", metavar="D", help="auto (the model's dtype) or fp8")
    serving.add_argument("--kv-cache-memory-bytes", metavar="BYTES",
                         help="the KV budget itself, as vLLM's flag of that name (skips the estimate)")
    serving.add_argument("--weights-bytes", metavar="BYTES",
                         help="weight memory as the engine loaded it, e.g. vLLM's 'Model loading took 14.96 GiB'")
    serving.add_argument("--reserve", metavar="BYTES",
                         help="non-KV memory besides weights (activation peak, CUDA graphs); default 6GiB, assumed")
    serving.add_argument("--block-size", type=int, default=16, metavar="TOKENS",
                         help="KV block size in tokens (vLLM: 16 on GPU, 128 on CPU)")
    serving.add_argument("--headroom", type=int, default=5, metavar="N",
                         help="maximum-length admissions the KV alarm must leave room for (default 5)")
    slo = parser.add_argument_group("SLO thresholds (each becomes a bucket edge)")
    slo.add_argument("--slo-ttft", metavar="SECONDS", help="e.g. 0.5 or 500ms")
    slo.add_argument("--slo-itl", metavar="SECONDS", help="e.g. 0.05 or 50ms")
    slo.add_argument("--slo-e2e", metavar="SECONDS", help="e.g. 30")
    from servewatch import dialects

    # engines whose latency histograms take edges from flags (an engine with none has no flags to print)
    parser.add_argument("--dialect", choices=(*(d.name for d in dialects.registered() if d.bucket_flags), "both"),
                        default="both", help="which engine's flags to print (default both: every known engine's)")
    parser.add_argument("--against", metavar="URL",
                        help="a live server (base URL or its /metrics URL) to compare with")
    parser.add_argument("--log", metavar="FILE", help="the live server's startup log (slot limit, cache size)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--wide", action="store_true", help=WIDE_HELP)


def run(args: argparse.Namespace) -> int:
    import json
    from fractions import Fraction

    from servewatch.derive import advice as adv
    from servewatch.derive import capacity as cap
    from servewatch.derive.hardware import resolve
    from servewatch.derive.model_facts import read_model
    from servewatch.derive.quantities import parse_bytes, parse_rate, parse_seconds
    from servewatch.errors import ServewatchError

    def quantity(parse, text, flag):
        if text is None:
            return None
        try:
            return parse(text)
        except ValueError as exc:
            raise ServewatchError(f"{flag}: {exc}") from None

    weights = quantity(parse_bytes, args.weights_bytes, "--weights-bytes")
    model = read_model(args.model, weights_bytes=weights)
    gpu = resolve(args.gpu, quantity(parse_bytes, args.gpu_memory, "--gpu-memory"),
                  quantity(parse_rate, args.bandwidth, "--bandwidth"))
    try:
        utilization = Fraction(args.gpu_memory_utilization)
    except ValueError:
        raise ServewatchError(f"--gpu-memory-utilization: {args.gpu_memory_utilization!r} is not a number "
                              "such as 0.9") from None
    reserve = quantity(parse_bytes, args.reserve, "--reserve")
    deployment = cap.Deployment(
        model=model, gpu=gpu, tp=args.tp, max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
        memory_utilization=utilization, kv_cache_dtype=args.kv_cache_dtype,
        kv_cache_memory_bytes=quantity(parse_bytes, args.kv_cache_memory_bytes, "--kv-cache-memory-bytes"),
        weights_bytes=weights,
        reserve_bytes=reserve if reserve is not None else cap.DEFAULT_RESERVE, reserve_given=reserve is not None,
        block_size=args.block_size, headroom_requests=args.headroom)
    if args.block_size < 1 or args.headroom < 0:
        raise ServewatchError("--block-size must be at least 1 and --headroom at least 0")
    capacity = cap.derive(deployment)
    def threshold(text, flag):
        if not text:
            return None
        seconds = quantity(parse_seconds, text, flag)
        if seconds <= 0:
            raise ServewatchError(f"{flag}: {text!r} is no threshold: it must be more than zero")
        return float(seconds)

    slo = adv.LatencyTargets(threshold(args.slo_ttft, "--slo-ttft"), threshold(args.slo_itl, "--slo-itl"),
                  threshold(args.slo_e2e, "--slo-e2e"))
    observed = _observe(args.against, args.log) if args.against or args.log else None
    plans, notes = adv.plan_edges(capacity, slo, observed)
    advice = adv.Advice(capacity, plans, adv.checks(deployment, capacity, observed) if observed else [], notes)
    from servewatch.dialects import registered

    dialects = tuple(d.name for d in registered() if d.bucket_flags) if args.dialect == "both" else (args.dialect,)
    if args.json:
        print(json.dumps(_as_json(model, gpu, advice, observed, dialects), indent=1))
    else:
        _print(model, gpu, advice, dialects, wide=args.wide)
    return 0


def _observe(url: str | None, log_path: str | None):
    from servewatch.derive.observed import Observed, add_log, from_scrape
    from servewatch.errors import SourceUnavailable
    from servewatch.sources.fetch import fetch_url
    from servewatch.watch.targets import metrics_url

    observed = Observed()
    if url:
        from servewatch.transport.urls import resolve

        resolve(url, "--against")       # a bad URL, a host name that does not resolve: one line, status 2
        url = metrics_url(url)
        status, body = fetch_url(url, timeout_s=METRICS_TIMEOUT_S, max_bytes=METRICS_MAX_BYTES)
        if status != 200:
            raise SourceUnavailable(f"--against {url}: HTTP {status}")
        observed = from_scrape(body)
    if log_path:
        try:
            with open(log_path, "rb") as handle:
                text = handle.read(MAX_LOG_BYTES).decode("utf-8", errors="replace")
        except OSError as exc:
            raise SourceUnavailable(f"--log {log_path}: {exc.strerror or exc}") from None
        add_log(observed, text)
    return observed


def _as_json(model, gpu, advice, observed, dialects) -> dict:
    from servewatch.derive import buckets as b

    c = advice.capacity
    return {
        "model": {"architecture": model.architecture, "layers": model.layers, "kv_heads": model.kv_heads,
                  "head_dim": model.head_dim, "vocab_size": model.vocab_size, "dtype": model.dtype,
                  "tied_embeddings": model.tied_embeddings, "weight_bytes": model.weight_bytes,
                  "weight_source": model.weight_source},
        "gpu": {"name": gpu.name, "memory_bytes": float(gpu.memory_bytes),
                "bandwidth_bytes_per_s": float(gpu.bandwidth_bytes_per_s) if gpu.bandwidth_bytes_per_s else None,
                "memory_source": gpu.memory_source, "bandwidth_source": gpu.bandwidth_source},
        "figures": [f.as_json() for f in c.figures],
        "buckets": {kind: plan.as_json() for kind, plan in advice.plans.items()},
        "flags": {d: {"args": advice.flags(d), "command_line": b.command_line(advice.flags(d))}
                  for d in dialects if advice.plans},
        "checks": [check.as_json() for check in advice.checks],
        "observed": observed.as_json() if observed else None,
        "notes": advice.notes,
    }


def _print(model, gpu, advice, dialects, wide: bool = False) -> None:
    from rich.text import Text

    from servewatch import table as tables
    from servewatch.derive import buckets as b
    from servewatch.derive import quantities as q

    Column = tables.Column
    console = tables.console(wide, highlight=False, soft_wrap=False, markup=False)   # a config.json's names as they are
    console.print(Text.assemble((str(model.architecture), "bold"),
                                f" — {model.layers} layers, {model.kv_heads} KV heads × {model.head_dim}, vocabulary "
                                f"{model.vocab_size:,}, {model.dtype}, weights {q.decimal(model.weight_bytes)} "
                                f"({model.weight_source}); {gpu.name}: {q.binary(gpu.memory_bytes)} "
                                f"({gpu.memory_source})"))
    table = tables.Table([Column("figure", priority=tables.ALWAYS, justify="left", shrink="fold", style="bold", ratio=2),
                          Column("value", priority=tables.ALWAYS, justify="left", shrink="fold", min_width=10,
                                 ratio=2),
                          Column("arithmetic", priority=10, justify="left", shrink="fold", min_width=24, ratio=6)],
                         dict(show_lines=True, expand=True))
    for figure in advice.capacity.figures:
        table.add_row(figure.label, figure.shown, Text.assemble(f"{figure.formula}\n", (figure.working, "dim")))
    tables.print_table(console, table)
    if advice.plans:
        edges = tables.Table([Column("histogram", priority=tables.ALWAYS, justify="left", style="bold"),
                              Column("edges", priority=tables.ALWAYS, justify="left", shrink="fold", min_width=20),
                              Column("placed", priority=10, justify="left", shrink="fold", min_width=20)],
                             dict(title="histogram edges (seconds)", show_lines=True))
        for kind, plan in advice.plans.items():
            edges.add_row(kind.upper(), ", ".join(f"{edge:g}" for edge in plan.edges), plan.reason)
        tables.print_table(console, edges)
        for dialect in dialects:
            console.print(Text.assemble((dialect, "bold"), " flags:"))
            print(b.command_line(advice.flags(dialect)), flush=True)   # one unwrapped line, to copy
    if advice.checks:
        checks = tables.Table([Column("check", priority=tables.ALWAYS, justify="left", shrink="fold", min_width=12),
                               Column("derived", priority=80, justify="left", shrink="fold", min_width=10),
                               Column("server", priority=80, justify="left", shrink="fold", min_width=10),
                               Column("", priority=90, justify="left", name="agrees or differs"),
                               Column("why", priority=20, justify="left", shrink="fold", min_width=20)],
                              dict(title="against the live server", show_lines=True))
        for check in advice.checks:
            mark = {True: "agrees", False: "DIFFERS", None: "—"}[check.agrees]
            checks.add_row(check.name, check.derived, check.observed, mark, check.explanation)
        tables.print_table(console, checks)
    for note in advice.notes:
        console.print(note)
