"""`serve` names each target's engine in /api/v1/targets (issue 53: a mixed fleet), as its scrapes name it: the
simulator speaking vLLM, SGLang and llama.cpp side by side, and none for a target that never answered."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

from servewatch.serve.config import FLEET_RECORDING, ServeConfig
from servewatch.serve.targets import spec_for
from tests.serve_harness import running_serve, sim_target, until


def test_each_target_is_named_by_the_engine_its_scrapes_name():
    async def main():
        async with contextlib.AsyncExitStack() as stack:
            sims = {dialect: await stack.enter_async_context(sim_target(dialect=dialect, startup_seconds=0.0))
                    for dialect in ("vllm", "sglang", "llamacpp")}
            urls = {dialect: sim.url for dialect, sim in sims.items()}
            named = {**urls, "none": "http://127.0.0.1:1"}        # never answers
            config = ServeConfig(targets=tuple(spec_for(u, name=d) for d, u in named.items()),
                                 listen="127.0.0.1:0", recording=replace(FLEET_RECORDING, interval=0.2))
            serve = await stack.enter_async_context(running_serve(config))

            async def engines():
                found = {t["name"]: t["engine"] for t in (await serve.json("/api/v1/targets"))["targets"]}
                return found if all(found.get(d) for d in urls) else None
            await until(engines, 30, "every simulator's engine named")
            return await engines()

    found = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert found == {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "none": None}
