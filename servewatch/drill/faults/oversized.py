"""A 4xx storm: prompts longer than the server's context window, which it must refuse one by one."""

from __future__ import annotations

import threading

from servewatch.drill.faults.base import Fault, register

ANSWER_MAX_BYTES = 1 << 20          # a refusal is a short JSON error; a longer answer is not read past this


@register
class Oversized(Fault):
    kind = "oversized"
    summary = ("prompts longer than the context window from several clients at once, sent for the hold (the server "
               "should answer 4xx)")
    params_known = {"rate": (int, float), "factor": (int, float), "clients": int}

    def inject(self, ctx) -> None:
        self.stop = threading.Event()
        self.statuses: dict[str, int] = {}
        self.lock = threading.Lock()
        words = int(ctx.max_model_len * float(self.param("factor", 2.0)))
        # Several clients, as a storm is: one alone waits for each refusal before it sends the next, and a real
        # vLLM busy with four long completions on 2 cores took ~6 s per refusal there (2 answers in a 12 s hold).
        clients = max(1, int(self.param("clients", 4)))
        gap_s = clients / float(self.param("rate", 4.0))       # `rate`: requests a second from all the clients
        self.threads = [threading.Thread(target=self._storm, args=(ctx, words, gap_s), daemon=True)
                        for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def _storm(self, ctx, words: int, gap_s: float) -> None:
        import json

        from servewatch.transport.contract import HttpRequest, send_blocking

        body = json.dumps({"model": ctx.model, "prompt": "one " * words, "max_tokens": 8}).encode()
        request = HttpRequest("POST", f"{ctx.url}/v1/completions", timeout_s=10.0, max_bytes=ANSWER_MAX_BYTES,
                              body=body)
        while not self.stop.wait(gap_s):
            got = send_blocking(request)      # the answer, or its one outcome (a long answer keeps its status)
            key = f"{got.status // 100}xx" if got.status is not None else "no answer"
            with self.lock:
                self.statuses[key] = self.statuses.get(key, 0) + 1

    def revert(self, ctx) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=15)
        self.facts["answers"] = dict(self.statuses)
