"""A stand-in server tree for the fast suite: one parent (this process) with the simulator as a child serving the
URL, and two stand-in ranks (fake_rank.py) beside it whose environment says the Flight Recorder is on and
whose pipe trigger writes dumps a real gloo job recorded — as a multi-rank engine's tree would be, for
`servewatch watch --pid THIS_PID`.

    python fake_server_tree.py PORT DIR CASE [SIM ARGS...]
Says "ready" once both ranks' pipes exist; SIGTERM ends its children and itself.
"""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

HERE = Path(__file__).parent


def main() -> None:
    port, work, case, sim_args = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
    children = [subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", port, "--max-num-seqs", "8",
                                  "--model-name", "tiny", *sim_args],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), TORCH_FR_BUFFER_SIZE="2000",
                   TORCH_NCCL_DEBUG_INFO_PIPE_FILE=str(work / "pipe_"), TORCH_FR_DUMP_TEMP_FILE=str(work / "fr_"))
        fixture = HERE.parent / "fixtures" / "flight_recorder" / f"gloo_{case}_rank{rank}.json"
        children.append(subprocess.Popen([sys.executable, str(HERE / "fake_rank.py"), "serve", str(fixture)],
                                         env=env, stdout=subprocess.PIPE, text=True))
    for child in children[1:]:
        assert child.stdout.readline().strip() == "ready"
    print("ready", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    for child in children:
        child.kill()
    for child in children:
        child.wait(timeout=10)


if __name__ == "__main__":
    main()
