"""A stand-in for `python -m vllm.entrypoints.openai.api_server` in the lab's fast tests.

It mimics what the lab relies on: the process tree (titles VLLM::EngineCore -> VLLM::Worker),
/health, a startup failure with vLLM's KV sizing message, and an exit with a chosen code.
It does NOT clean up its children on SIGTERM, so the lab's teardown must.
"""

import argparse
import http.server
import os
import subprocess
import sys

SLEEPER = "import time\nwhile True: time.sleep(1)\n"
# A process started with argv[0] = "VLLM::..." has no usable sys.executable: pass the path along.
ENGINE = (
    "import subprocess, sys, time\n"
    "subprocess.Popen(['VLLM::Worker', '-c', %r], executable=sys.argv[1])\n"
    "while True: time.sleep(1)\n"
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kv-cache-memory-bytes", type=int, default=0)
    parser.add_argument("--max-model-len", type=int, default=2048)
    args, _ = parser.parse_known_args()
    print(f"(APIServer pid={os.getpid()}) INFO 11-29 13:42:04 [api_utils.py:347] fake vLLM", flush=True)
    if args.kv_cache_memory_bytes <= 1048576:
        print("Traceback (most recent call last):\n  File \"core.py\", line 1, in <module>", file=sys.stderr)
        print(f"ValueError: To serve at least one request with the model's max seq len ({args.max_model_len}), "
              "(0.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.0 GiB).",
              file=sys.stderr)
        print("RuntimeError: Engine core initialization failed. See root cause above.", file=sys.stderr, flush=True)
        sys.exit(1)
    subprocess.Popen(["VLLM::EngineCore", "-c", ENGINE % SLEEPER, sys.executable], executable=sys.executable)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/_exit/"):
                os._exit(int(self.path.rsplit("/", 1)[1]))
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.HTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
