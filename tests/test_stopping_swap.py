"""stopping.on_stop's remove(): a stop signal that lands while the loop's handlers are being swapped back reaches
the handler put back, never the default action that kills the process with no stop line (the load test's -1 under
load). Run in a subprocess: on the code before the fix that subprocess dies by SIGHUP."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import asyncio, os, signal
    from servewatch import stopping

    heard = []
    signal.signal(signal.SIGHUP, lambda signum, frame: heard.append(signum))

    async def main():
        loop = asyncio.get_running_loop()
        remove = stopping.on_stop(loop, lambda: None)
        original = loop.remove_signal_handler

        def remove_then_signal(signum):
            done = original(signum)          # the default action is back here
            if signum == signal.SIGHUP:
                os.kill(os.getpid(), signal.SIGHUP)
            return done

        loop.remove_signal_handler = remove_then_signal
        remove()

    asyncio.run(main())
    print("heard", heard, "handler restored", callable(signal.getsignal(signal.SIGHUP)))
""")


def test_a_signal_during_the_handlers_swap_reaches_the_handler_put_back():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() == f"heard [{int(__import__('signal').SIGHUP)}] handler restored True"
