"""A stand-in rank (standard library only) for the fast suite: its environment says what a torchrun rank's
would (RANK, TORCH_FR_BUFFER_SIZE, the dump trigger pipe and dump file prefixes); it serves the documented
pipe trigger by writing a dump recorded from a real gloo job (tests/fixtures/flight_recorder/).

    python fake_rank.py MODE DUMP_FIXTURE [RANK]   (RANK given: the environment has none, as an engine's own
                                                    worker processes have none)
    MODE: serve    — each read of the pipe writes the fixture to the dump file (a temporary file, renamed)
          noread   — makes the pipe and never opens it (a write would have no reader)
          huge     — each read of the pipe leaves a sparse dump over servewatch's size bound
Says "ready" on stdout once the pipe exists, "dumped" after each dump.
"""

import os
import shutil
import sys
import threading


def main() -> None:
    mode, fixture = sys.argv[1], sys.argv[2]
    rank = sys.argv[3] if len(sys.argv) > 3 else os.environ["RANK"]   # a rank its environment does not say
    pipe = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + rank + ".pipe"
    target = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + rank
    os.mkfifo(pipe)
    if mode == "noread":
        print("ready", flush=True)
        threading.Event().wait()
    # Open for reading before saying ready (a write before that would find no reader), and hold a writer of
    # its own so the pipe never reads as ended: each read then waits for the next request.
    fifo = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fifo, True)
    keep = os.open(pipe, os.O_WRONLY)
    print("ready", flush=True)
    while keep:
        if not os.read(fifo, 64):
            continue
        if mode == "huge":
            with open(target + ".tmp", "wb") as out:
                out.truncate(40 * 1024 * 1024)
        else:
            shutil.copyfile(fixture, target + ".tmp")
        os.replace(target + ".tmp", target)
        print("dumped", flush=True)


if __name__ == "__main__":
    main()
