"""The KV that a request's prefill left for decode is lost before decode reads it (a prefill/decode pair joined
by vLLM's ExampleConnector, whose KV goes through files in a shared directory): one request is prefilled by hand,
every file under the directory is removed, then its decode leg is sent. vLLM 0.32's decode does not compute the
prompt itself: its engine dies of the missing file (FileNotFoundError, EngineDeadError, HTTP 500) and the decode
server exits (docs/site/real-engines.md, 2026-12-06). The side at fault, the one to restart, is decode."""

from __future__ import annotations

from servewatch.drill.faults.base import Fault, register


@register
class KvLost(Fault):
    kind = "kv_lost"
    summary = "the KV files a request's prefill left are removed before decode reads them (a pair, example connector)"
    workload = False          # the one request handed over by hand is the fault's traffic
    takes_server_down = True  # decode's engine dies of it: the pair is started again after
    demands = "restart"

    def inject(self, ctx) -> None:
        storage = ctx.pair.kv_storage() if ctx.pair is not None else None
        if storage is None:
            raise ctx.cannot("kv_lost: only on a prefill/decode pair joined by the example connector")
        self.handover = ctx.hand_over()
        files = [path for path in storage.rglob("*") if path.is_file()]
        for path in files:
            path.unlink(missing_ok=True)
        ctx._injected_now()
        self.facts["kv_files_removed"] = len(files)
        self.handover.decode(ctx.step.request_timeout_s)

    def revert(self, ctx) -> None:
        self.facts["decode_after_loss"] = self.handover.join(ctx.step.hold_s)
