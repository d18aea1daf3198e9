"""`servewatch gpu-check`: this node's GPUs judged once, with node-problem-detector's exit-code protocol."""

from __future__ import annotations

import argparse

HELP = "check this node's GPUs once (node-problem-detector's custom-plugin protocol)"
DESCRIPTION = ("Read every GPU once through NVML (or dcgm-exporter's page with --gpu-metrics) and say whether the "
               "node should be drained: a GPU lost (fallen off the bus), a row-remap failure, uncorrectable ECC "
               "errors, NVML's recovery action asking for a reset or a reboot, or (from dcgm-exporter) a last Xid "
               "whose NVIDIA action needs the hardware. Exit status as node-problem-detector's custom plugins "
               "report it: 0 every GPU fit, 1 a problem (the first line says which GPU and why), 2 unknown (the "
               "GPUs could not be read). deploy/kubernetes/node-problem-detector.yaml runs it.")

OK, PROBLEM, UNKNOWN = 0, 1, 2     # node-problem-detector: OK, NonOK, Unknown
NPD_MESSAGE_CHARS = 200            # the monitor's max_output_length: the message NPD keeps


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--npd", action="store_true",
                        help=f"one line of at most {NPD_MESSAGE_CHARS} characters, the node condition's message")
    parser.add_argument("--gpu-metrics", metavar="URL",
                        help="read dcgm-exporter's /metrics page at URL instead of NVML (its last Xid per GPU too)")
    parser.add_argument("--timeout", type=float, default=3.0, metavar="S",
                        help="seconds to wait for the --gpu-metrics page (default 3)")


def run(args: argparse.Namespace) -> int:
    from servewatch.detectors.gpu import node_gpu_problems

    devices, last_xids, unknown = _read(args)
    if unknown is not None:
        return _say(args, UNKNOWN, [f"GPUs not read: {unknown}"])
    if not devices:
        return _say(args, UNKNOWN, ["GPUs not read: no GPU listed"])
    problems = node_gpu_problems(devices, last_xids)
    if problems:
        return _say(args, PROBLEM, [f"{p}: drain this node, do not place work on this GPU" for p in problems])
    return _say(args, OK, [f"{len(devices)} GPU(s) fit: none lost, no row-remap failure, no uncorrectable ECC error, "
                           "no reset or reboot asked for"])


def _read(args) -> tuple[tuple, dict[int, int], str | None]:
    """(devices, last Xid by device index, why they could not be read or None)."""
    if args.gpu_metrics:
        from servewatch.errors import ExpositionError, ServewatchError
        from servewatch.serve.targets import check_gpu_metrics_url
        from servewatch.sources.dcgm import read_page
        from servewatch.transport.contract import Failed, HttpRequest, send_blocking

        try:                    # the one URL checker (servewatch.transport.urls), as serve's --gpu-metrics
            url = check_gpu_metrics_url(args.gpu_metrics)
        except ServewatchError as exc:
            return (), {}, f"--gpu-metrics {exc}"
        # one blocking read through the transport contract: refused, a name that does not resolve... in its words
        got = send_blocking(HttpRequest("GET", url, timeout_s=args.timeout, max_bytes=8 << 20))
        failed = got if isinstance(got, Failed) else got.failure()
        if failed is not None:
            return (), {}, f"dcgm-exporter's page at {args.gpu_metrics} not read ({failed.detail})"
        try:
            devices, last = read_page(got.body)
        except (ValueError, ExpositionError) as exc:
            return (), {}, f"dcgm-exporter's page at {args.gpu_metrics} not read ({exc})"
        return devices, last, None
    import time

    from servewatch.sources.gpu import NvmlProbe

    probe = NvmlProbe()
    if probe.error is not None:
        return (), {}, f"NVML {probe.error}"
    return probe.snapshot(time.time()).devices, {}, None


def _say(args, code: int, lines: list[str]) -> int:
    if args.npd:
        line = lines[0] + (f" (and {len(lines) - 1} more GPU(s))" if len(lines) > 1 else "")
        print(line if len(line) <= NPD_MESSAGE_CHARS else line[:NPD_MESSAGE_CHARS - 1] + "…")
    else:
        print("\n".join(lines))
    return code
