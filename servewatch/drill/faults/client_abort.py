"""Clients that give up: streaming requests whose connections are closed as their first bytes arrive."""

from __future__ import annotations

import threading
import time

from servewatch.drill.faults.base import Fault, register


@register
class ClientAbort(Fault):
    kind = "client_abort"
    summary = "streaming requests closed by the client after their first bytes"
    # over_s: the clients' starts spread evenly over that many seconds (0: all at once). All at once, one freeze of
    # the host at the injection holds every client past its moment to leave: in the real vLLM drill of 2026-12-07
    # 11:43 a 1.56 s freeze (measured by the suite's meter) let the engine finish 16 of the 24 480-token answers
    # before their clients hung up, and requests_aborted rightly did not fire. Spread, a freeze catches a few (but each
    # answer is quicker, and more finish before their client leaves: tests/conformance/plans/start-vllm.yaml).
    params_known = {"requests": int, "output_tokens": int, "over_s": (int, float)}

    def inject(self, ctx) -> None:
        count = int(self.param("requests", 24))
        tokens = int(self.param("output_tokens", 512))
        over = max(0.0, float(self.param("over_s", 0.0)))
        self.done = {"aborted": 0, "not_started": 0}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._one, args=(ctx, tokens, over * i / count), daemon=True)
                        for i in range(count)]
        for thread in self.threads:
            thread.start()

    def _one(self, ctx, tokens: int, after_s: float = 0.0) -> None:
        if after_s > 0:
            time.sleep(after_s)     # this client's place in the spread (a schedule, not a wait for anything)
        # Not the transport contract: this fault IS a client that hangs up mid-stream, a few tokens in; it needs
        # the raw connection to leave it at that moment, where the contract reads a bounded answer to its end.
        import http.client
        import json

        body = json.dumps({"model": ctx.model, "prompt": "Count slowly from one upwards.", "max_tokens": tokens,
                           "ignore_eos": True, "stream": True}).encode()
        started = False
        conn = http.client.HTTPConnection(ctx.host, ctx.port, timeout=self.step.hold_s + 5)
        try:
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            # The first bytes of the body are the first token's: the request is running in the engine when we
            # leave, at once (every moment waited is one in which a freeze of this process lets the engine finish
            # the answer whole, and then no client hung up)
            started = response.status == 200 and bool(response.read1(64) if hasattr(response, "read1")
                                                       else response.read(64))
        except OSError:
            pass
        finally:
            conn.close()
        with self.lock:
            self.done["aborted" if started else "not_started"] += 1

    def revert(self, ctx) -> None:
        spread = max(0.0, float(self.param("over_s", 0.0)))
        for thread in self.threads:
            thread.join(timeout=self.step.hold_s + spread + 10)
        self.facts.update(self.done)
