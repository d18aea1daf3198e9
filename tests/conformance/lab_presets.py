"""`servewatch load`'s four presets against a real engine, and the signature shapes that tell them apart
(measured first on an RTX 3060 serving Qwen2.5-7B-AWQ): only overload queues, with running pinned at the
slot limit; long output generates longest; long prompt shows its input tokens."""

from __future__ import annotations

import json
from pathlib import Path

from lab_cli import run_cli


def run_presets(url: str, runs: dict[str, tuple[str, ...]], out_dir: Path, *, tokenizer: Path,
                model: str | None = None, timeout_s: float = 240) -> dict[str, dict]:
    """`servewatch load URL ARGS --json` per preset; each must answer every request. Their signature rows."""
    rows = {}
    for name, args in runs.items():
        out = out_dir / name
        named = ("--model", model) if model is not None else ()
        done = run_cli("load", url, *args, "--tokenizer", str(tokenizer), *named, "--json", "--out", str(out),
                       timeout_s=timeout_s)
        assert done.returncode == 0, f"load {name} exited {done.returncode}: {done.stderr[-1500:]}"
        summary = json.loads(done.stdout)
        assert summary["scenario"] == name
        assert summary["errors"] == {} or not any(summary["errors"].values()), summary["errors"]
        assert summary["ok"] == summary["requests"]
        assert (out / "requests.jsonl").is_file() and (out / "server.jsonl").is_file()
        rows[name] = summary["signature"]
    return rows


def signature_lines(rows: dict[str, dict]) -> list[str]:
    return [f"signature {name:12s} " + " ".join(f"{k}={_fmt(v)}" for k, v in row.items() if not isinstance(v, dict))
            for name, row in rows.items()]


def assert_signature_shapes(rows: dict[str, dict], *, slots: int, normal_prompt_tokens: int = 44,
                            long_prompt_tokens: int = 1500) -> None:
    normal, overload, long_prompt, long_output = (rows[n] for n in ("normal", "overload", "long-prompt",
                                                                     "long-output"))
    # Only overload queues, with running pinned at the slot limit.
    assert overload["max_running"] == slots, overload
    assert overload["max_waiting"] > 0, overload
    for other in (normal, long_prompt, long_output):
        assert other["max_waiting"] < overload["max_waiting"], (other, overload)
        assert overload["queue_wait_s"] > 5 * other["queue_wait_s"], (other, overload)
    # Long output: the longest generation and the worst E2E once queueing is set aside, with a TTFT of
    # the normal kind (overload's E2E is mostly its queue wait). Times are compared in units of each run's
    # own time per output token: the presets run one after another on a shared machine whose speed
    # changed 10-fold within a minute here (normal's ITL 53 ms, long output's 5 ms a minute later).
    def per_token(row: dict, key: str) -> float:
        return row[key] / row["itl_s"]

    assert per_token(long_output, "generation_s") == max(per_token(r, "generation_s") for r in rows.values())
    assert per_token(long_output, "e2e_s") == max(per_token(r, "e2e_s") for r in (normal, long_prompt, long_output))
    assert per_token(long_output, "e2e_s") > (overload["e2e_s"] - overload["queue_wait_s"]) / overload["itl_s"]
    assert per_token(long_output, "ttft_s") < per_token(overload, "ttft_s")
    assert per_token(long_output, "ttft_s") <= 3 * per_token(normal, "ttft_s") + 1
    assert long_output["tokens_out"] == 1024
    assert normal["tokens_out"] == overload["tokens_out"] == 128
    # Long prompt shows its input tokens; normal its short prompt.
    assert abs(long_prompt["tokens_in"] - long_prompt_tokens) <= 2
    assert abs(normal["tokens_in"] - normal_prompt_tokens) <= 2
    assert long_prompt["tokens_in"] > 30 * normal["tokens_in"]


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
