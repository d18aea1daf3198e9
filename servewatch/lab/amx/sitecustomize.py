"""Run at the start of every Python process of a lab engine (the lab puts this directory on its PYTHONPATH):
ask Linux for this process's permission to use Intel AMX tiles, as `torch.cpu._init_amx()` does.

Linux grants AMX tile state to a process only on request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
an AMX instruction before it is an illegal instruction. vLLM 0.32's CPU attention picks its AMX kernel wherever
the CPU has AMX (bf16, blocks of 32) and never asks: it works only once some oneDNN call has asked first. On an
Intel Xeon with AMX (this project's VM of 2026-12-07), a decode instance whose first forward step was a one-token
decode of transferred KV (the explicit KV size skips the profiling run, eager skips warm-up) died of SIGILL in
`cpu_attention_with_kv_cache`. A no-op elsewhere: on another CPU the call fails and nothing changes; on
another architecture it is not made.
"""

import os

if os.uname().machine == "x86_64":
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18)   # SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XTILEDATA
    except (OSError, AttributeError):
        pass
