"""Continuous batching with vLLM V1's semantics, driven by the caller's clock.

Each step: first the running requests, oldest first, get their next tokens (a decode token, or the
next chunk of a prefill) within the token budget (`max_batched_tokens`); a request that needs a KV
block when none is free preempts the newest running request (recompute: its blocks are released, its
progress reset, and it goes back to the *front* of the waiting queue). Then — only if nothing was
preempted this step — waiting requests are admitted in order while there is a free slot
(`max_num_seqs`), token budget and enough free blocks for their first chunk, after a prefix-cache
lookup by block hash. Admission allocates only the blocks the scheduled tokens need, so KV fills
as sequences grow, as in vLLM.

`schedule(now)` decides a step; `apply(plan, now)` commits it at the step's end: computed tokens
advance, a token is sampled for each request whose context is complete, and finished requests
(stop / length) release their blocks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from servewatch.sim.kvcache import BlockPool
from servewatch.sim.request import (FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, FINISHED, RUNNING, WAITING,
                                    Request)


@dataclass
class Admission:
    request: Request
    query_tokens: int     # tokens looked up in the prefix cache
    hit_tokens: int       # of which found cached


@dataclass
class StepPlan:
    scheduled: list[tuple[Request, int]]           # (request, new tokens computed this step)
    preempted: list[Request]
    admitted: list[Admission]
    prefill_tokens: int                            # tokens of requests still before their first/next sample
    decode_tokens: int
    context_tokens: int                            # KV read by attention this step

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    @property
    def empty(self) -> bool:
        return not self.scheduled


@dataclass
class SimStep:
    t: float
    plan: StepPlan
    duration: float = 0.0
    sampled: list[Request] = field(default_factory=list)        # requests that got one token
    first_tokens: list[Request] = field(default_factory=list)   # of which the first token
    itl_groups: dict[float, int] = field(default_factory=dict)  # inter-token interval -> count
    finished: list[Request] = field(default_factory=list)


class Scheduler:
    def __init__(self, *, pool: BlockPool, block_size: int, max_num_seqs: int, max_batched_tokens: int,
                 max_model_len: int):
        self.pool = pool
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.max_batched_tokens = max_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.admission_blocked = False

    # --- queue operations ----------------------------------------------------------------------
    def add(self, request: Request, now: float) -> None:
        request.status = WAITING
        request.queued_ts = now
        self.waiting.append(request)

    def abort(self, request: Request, now: float) -> bool:
        if request.status == FINISHED:
            return False
        if request.status == RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        self._finish(request, FINISH_ABORT, now)
        return True

    def abort_all(self, reason: str, now: float) -> list[Request]:
        victims = list(self.running) + list(self.waiting)
        self.running.clear()
        self.waiting.clear()
        for request in victims:
            self._finish(request, reason, now)
        return victims

    # --- one step ------------------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        budget = self.max_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        preempted: list[Request] = []
        admitted: list[Admission] = []
        prefill = decode = context = 0
        bs = self.block_size
        running = self.running
        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            total = request.prompt_len + request.output_len
            n = total - request.num_computed
            if n > budget:
                n = budget
            if n <= 0:
                index += 1
                continue
            if request.num_computed + n > len(request.blocks) * bs and not self._grow(request, n):
                victim = None
                while not self._grow(request, n):
                    victim = self.running.pop()
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is request:
                        break
                if victim is request:
                    break
            scheduled.append((request, n))
            budget -= n
            index += 1
            if n == 1 and request.output_len > 0 and request.num_computed + 1 == total:
                decode += 1
            else:
                prefill += n
            context += request.num_computed + n

        if not preempted and not self.admission_blocked:
            while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
                request = self.waiting[0]
                hits: list[int] = []
                # KV that came by transfer (a P/D decode) counts as computed at the first admission only: a
                # preempted request recomputes it locally, as vLLM's does
                external = min(request.external_tokens, request.num_tokens - 1) if request.scheduled_ts is None else 0
                if request.num_computed == 0 and not external:
                    hits = self.pool.lookup(request.block_hashes)
                    if len(hits) * self.block_size >= request.num_tokens:
                        hits = hits[:-1]  # at least one token must be computed to sample from
                hit_tokens = len(hits) * self.block_size
                n = min(request.num_tokens - hit_tokens - external, budget)
                self.pool.touch(hits)
                fresh = self.pool.allocate(_blocks_for(hit_tokens + external + n, self.block_size) - len(hits))
                if fresh is None:
                    self.pool.release(hits)
                    break
                self.waiting.popleft()
                first_admission = request.scheduled_ts is None
                request.blocks = hits + fresh
                request.num_computed = hit_tokens + external
                request.num_cached_blocks = len(hits)
                request.status = RUNNING
                if first_admission:
                    request.scheduled_ts = now
                    request.prefix_hit_tokens = hit_tokens
                self.running.append(request)
                admitted.append(Admission(request, request.num_tokens, hit_tokens))
                scheduled.append((request, n))
                budget -= n
                prefill += n
                context += request.num_computed + n
        return StepPlan(scheduled, preempted, admitted, prefill, decode, context)

    def apply(self, plan: StepPlan, now: float) -> SimStep:
        result = SimStep(t=now, plan=plan)
        sampled, itl = result.sampled, result.itl_groups
        max_model_len = self.max_model_len
        for request, n in plan.scheduled:
            if request.status != RUNNING:
                continue  # aborted while the step ran
            request.num_computed += n
            if request.num_cached_blocks < len(request.block_hashes):
                self._publish_prompt_blocks(request)
            if request.num_computed < request.prompt_len + request.output_len:
                continue  # a prefill chunk; no token yet
            request.output_len += 1
            request.token_times.append(now)
            if request.first_token_ts is None:
                request.first_token_ts = now
                result.first_tokens.append(request)
            else:
                gap = now - request.last_token_ts
                itl[gap] = itl.get(gap, 0) + 1
            request.last_token_ts = now
            sampled.append(request)
            if request.output_len >= request.stop_at or request.prompt_len + request.output_len >= max_model_len:
                self.running.remove(request)
                self._finish(request, self._finish_reason(request), now)
                result.finished.append(request)
        return result

    # --- internals -----------------------------------------------------------------------------
    def _grow(self, request: Request, n: int) -> bool:
        need = _blocks_for(request.num_computed + n, self.block_size) - len(request.blocks)
        if need <= 0:
            return True
        fresh = self.pool.allocate(need)
        if fresh is None:
            return False
        request.blocks.extend(fresh)
        return True

    def _preempt(self, request: Request) -> None:
        self.pool.release(request.blocks)
        request.blocks = []
        request.num_computed = 0
        request.num_cached_blocks = 0
        request.preemptions += 1
        request.status = WAITING
        self.waiting.appendleft(request)

    def _publish_prompt_blocks(self, request: Request) -> None:
        full = min(request.num_computed // self.block_size, len(request.block_hashes))
        while request.num_cached_blocks < full:
            i = request.num_cached_blocks
            self.pool.cache(request.blocks[i], request.block_hashes[i])
            request.num_cached_blocks += 1

    @staticmethod
    def _finish_reason(request: Request) -> str:
        """Why a request that reached its stop point stopped: EOS first, else a length limit."""
        if request.eos_at is not None and not request.ignore_eos and request.output_len >= request.eos_at:
            return FINISH_STOP
        return FINISH_LENGTH

    def finish(self, request: Request, reason: str, now: float) -> None:
        """Finish a request the scheduler never saw (aborted before it was queued)."""
        self._finish(request, reason, now)

    def _finish(self, request: Request, reason: str, now: float) -> None:
        if request.blocks:
            self.pool.release(request.blocks)
            request.blocks = []
        request.status = FINISHED
        request.finish_reason = reason
        request.finished_ts = now
        request.notify()


def _blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)
