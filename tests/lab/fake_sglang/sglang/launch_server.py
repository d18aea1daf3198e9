"""A stand-in for `python -m sglang.launch_server` in the lab's fast tests.

It mimics what the lab relies on: the process tree (titles sglang::scheduler and sglang::detokenizer
under the main process), /health, SIGTERM draining the tree, and (with --context-length 1) a call to a
stubbed op of the test-only sgl_kernel stand-in once it serves.
"""

import argparse
import http.server
import os
import signal
import subprocess
import sys
import threading

SLEEPER = "import time\nwhile True: time.sleep(1)\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--context-length", type=int, default=2048)
    args, _ = parser.parse_known_args()
    children = [subprocess.Popen([title, "-c", SLEEPER], executable=sys.executable)
                for title in ("sglang::scheduler", "sglang::detokenizer")]

    def drain(*_):
        print("[2026-11-30 13:52:12] SIGTERM received. Draining requests and shutting down...", flush=True)
        for child in children:
            child.kill()
        os._exit(0)

    signal.signal(signal.SIGTERM, drain)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer((args.host, args.port), Handler)
    print("[2026-11-30 13:51:42] The server is fired up and ready to roll!", flush=True)
    if args.context_length == 1:
        import sgl_kernel

        def touch_a_stub():
            try:
                sgl_kernel.silu_and_mul_cpu()
            except NotImplementedError:
                pass
        threading.Timer(0.5, touch_a_stub).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
