"""A test-only two-rank gloo job (run with a python that has torch): the Flight Recorder on
(TORCH_FR_BUFFER_SIZE), a dump trigger per rank on a named pipe, and a fault at one collective.

    python gloo_job.py RANK WORLD PORT MODE
    MODE: behind   — the last rank sleeps before its 5th all_reduce while the others wait in it
          mismatch — at the 5th collective rank 0 all_reduces, the last rank broadcasts
          clean    — five all_reduces, then idle until killed

The dump trigger follows ProcessGroupNCCL's documented pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE: a FIFO named
PREFIX + RANK + ".pipe"; anything written to it asks for a dump), which gloo has no watchdog to serve: a
thread here serves it instead and writes the Flight Recorder's own JSON (`_dump_fr_trace_json`) to
TORCH_FR_DUMP_TEMP_FILE + RANK, whole (a temporary file, then a rename). The dump content is torch's.
The job says each step on stdout ("rank R in collective N" once it is enqueued), so a test waits on lines, not time.
"""

import os
import sys
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_json


def serve_dumps(rank: int) -> None:
    pipe = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + f"{rank}.pipe"
    target = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + f"{rank}"
    os.mkfifo(pipe)
    # Open for reading before saying ready (a write before that would find no reader), and hold a writer of
    # its own so the pipe never reads as ended: each read then waits for the next request.
    fifo = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fifo, True)
    keep = os.open(pipe, os.O_WRONLY)
    print(f"rank {rank} pipe ready", flush=True)
    while keep:
        if not os.read(fifo, 64):
            continue
        data = _dump_fr_trace_json(True, False)   # collectives, not only the active ones
        with open(target + ".tmp", "wb") as out:
            out.write(data if isinstance(data, bytes) else data.encode())
        os.replace(target + ".tmp", target)
        print(f"rank {rank} dumped", flush=True)


def main() -> None:
    rank, world, port, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    threading.Thread(target=serve_dumps, args=(rank,), daemon=True).start()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    last = world - 1
    t = torch.ones(1024)
    for n in range(1, 6):
        if n == 5 and mode == "behind" and rank == last:
            print(f"rank {rank} sleeping before collective {n}", flush=True)
            threading.Event().wait()            # never enters the 5th all_reduce
        # asked without waiting, so that "in collective N" is said once the collective is enqueued — and in the
        # Flight Recorder's ring — not before the call (a dump taken between a line said first and the call
        # missed rank 0's 5th entry in a CI run of 2026-12-05)
        if n == 5 and mode == "mismatch" and rank == last:
            work = dist.broadcast(t, src=last, async_op=True)
        else:
            work = dist.all_reduce(t, async_op=True)
        print(f"rank {rank} in collective {n}", flush=True)
        work.wait()
        print(f"rank {rank} left collective {n}", flush=True)
    print(f"rank {rank} idle", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
