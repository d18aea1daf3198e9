"""A 4xx storm: prompts longer than the server's context window, which it must refuse one by one."""

from __future__ import annotations

import threading

from servewatch.drill.faults.base import Fault, register


@register
class Oversized(Fault):
    kind = "oversized"
    summary = "prompts longer than the context window, sent for the hold (the server should answer 4xx)"
    params_known = {"rate": (int, float), "factor": (int, float)}

    def inject(self, ctx) -> None:
        self.stop = threading.Event()
        self.statuses: dict[str, int] = {}
        words = int(ctx.max_model_len * float(self.param("factor", 2.0)))
        self.thread = threading.Thread(target=self._storm, args=(ctx, words, float(self.param("rate", 4.0))),
                                       daemon=True)
        self.thread.start()

    def _storm(self, ctx, words: int, rate: float) -> None:
        import http.client
        import json

        body = json.dumps({"model": ctx.model, "prompt": "one " * words, "max_tokens": 8}).encode()
        while not self.stop.wait(1.0 / rate):
            conn = http.client.HTTPConnection(ctx.host, ctx.port, timeout=10)
            try:
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                key = f"{response.status // 100}xx"
            except OSError:
                key = "no answer"
            finally:
                conn.close()
            self.statuses[key] = self.statuses.get(key, 0) + 1

    def revert(self, ctx) -> None:
        self.stop.set()
        self.thread.join(timeout=15)
        self.facts["answers"] = dict(self.statuses)
