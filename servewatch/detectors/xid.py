"""NVIDIA Xid codes: what each means and what helps, from NVIDIA's published Xid catalogue.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (Ampere and newer GPUs),
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html — its columns Mnemonic, Description and
"Resolution Bucket (Immediate Action)". The table below keeps the catalogue's mnemonic and its immediate action
word for each code servewatch names, with the meaning in short words (not the catalogue's text). A code not
listed here is reported as unknown: never guessed.

servewatch's action for each immediate action:
  RESTART_APP                     restart_app   the process: a restart helps (the GPU is fine)
  RESET_GPU                       reset_gpu     the GPU must be reset (or replaced): do not restart onto it
  RESTART_BM (baseboard/node)     reboot        the node must be rebooted: do not restart onto this GPU
  IGNORE                          ignore        informational; no verdict (e.g. a page retired as designed)
  WORKFLOW_* (a decision tree)    workflow      the catalogue's workflow decides: a person reads it
  XID_154                         recovery      the driver's reported recovery action decides: NVML's
                                                GPU recovery action field, read with each reading, replaces it
                                                (none: ignore; GPU/bus reset, drain and reset: reset_gpu; node or
                                                system reboot: reboot; drain P2P, IMEX: workflow)
Each firing of `gpu_fault` carries the action class of its own fault (ACTION_CLASS, the one mapping every consumer
reads through the verdict: the watch JSON line, livez/readyz, the rules, node-problem-detector's check, the bundle):
the hardware actions (reset_gpu, reboot) make it a drain (guard exits with its hardware status and a restart policy
must not start the server on that GPU again); restart_app a restart (a restart of the process helps); the rest
(workflow, an unresolved recovery action, unknown) a page: a person decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.verdict import DRAIN, INFO, PAGE, RESTART

RESTART_APP = "restart_app"
RESET_GPU = "reset_gpu"
REBOOT = "reboot"
IGNORE = "ignore"
WORKFLOW = "workflow"
RECOVERY = "recovery"
UNKNOWN = "unknown"
HARDWARE_ACTIONS = (RESET_GPU, REBOOT)
ACTION_WORDS = {RESTART_APP: "restart the process", RESET_GPU: "reset the GPU",
                REBOOT: "reboot the node", IGNORE: "nothing (informational)",
                WORKFLOW: "follow NVIDIA's workflow for it", RECOVERY: "the driver's recovery action decides",
                UNKNOWN: "unknown (not in servewatch's Xid table)"}
# servewatch's action class for each action word: what a gpu_fault with that fault makes happen
ACTION_CLASS = {RESTART_APP: RESTART, RESET_GPU: DRAIN, REBOOT: DRAIN, IGNORE: INFO, WORKFLOW: PAGE, RECOVERY: PAGE,
                UNKNOWN: PAGE}
# ... and the words a gpu_fault's why line ends with for that class
CLASS_WORDS = {DRAIN: "do not restart on this GPU", RESTART: "a restart of the process helps",
               PAGE: "a person decides", INFO: "nothing to do"}


def action_class(action: str) -> str:
    """The action class (restart, drain, page, info) of an action word; a word not known is a person's to decide."""
    return ACTION_CLASS.get(action, PAGE)


def words_of_class(cls: str) -> tuple[str, ...]:
    """The action words of one class, in declaration order: what the rules select on servewatch_gpu_fault."""
    return tuple(word for word, found in ACTION_CLASS.items() if found == cls)


CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    mnemonic: str
    meaning: str
    catalog_action: str       # the catalogue's "Resolution Bucket (Immediate Action)"
    action: str               # servewatch's word for it (above)

    @property
    def hardware(self) -> bool:
        return self.action in HARDWARE_ACTIONS

    @property
    def action_class(self) -> str:
        return action_class(self.action)


_BUCKET = {"RESTART_APP": RESTART_APP, "RESET_GPU": RESET_GPU, "RESTART_BM": REBOOT, "IGNORE": IGNORE,
           "XID_154": RECOVERY}

_ROWS = (
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP"),
    (11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "invalid or corrupted push buffer stream", "RESTART_APP"),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception", "RESTART_APP"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP"),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "invalid or corrupted push buffer stream (PBDMA)", "RESTART_APP"),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "context-switch firmware watchdog timeout", "IGNORE"),
    (39, "ROBUST_CHANNEL_CE0_ERROR", "copy engine exception", "RESTART_APP"),
    (40, "ROBUST_CHANNEL_CE1_ERROR", "copy engine exception", "RESTART_APP"),
    (41, "ROBUST_CHANNEL_CE2_ERROR", "copy engine exception", "RESTART_APP"),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing (channel reset)", "IGNORE"),
    (44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "graphics engine fault during a context switch", "IGNORE"),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "preemptive cleanup after earlier errors", "WORKFLOW_XID_45"),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing (timeout)", "RESET_GPU"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit (uncorrectable) ECC error in GPU memory", "WORKFLOW_XID_48"),
    (62, "PMU_HALT_ERROR", "internal micro-controller halted", "RESET_GPU"),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "a memory page retired or row remapped (as designed)", "IGNORE"),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "memory page retirement or row remapping failed", "RESET_GPU"),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "video decoder exception", "RESTART_APP"),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "graphics engine class error", "RESTART_APP"),
    (74, "NVLINK_ERROR", "NVLink error", "WORKFLOW_NVLINK_ERR"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM"),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", "IGNORE"),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "contained ECC error (one application affected)", "RESTART_APP"),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained ECC error (all applications affected)", "RESET_GPU"),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context switch timeout", "RESET_GPU"),
    (110, "SEC_FAULT_ERROR", "security fault", "RESET_GPU"),
    (119, "GSP_RPC_TIMEOUT", "timeout waiting for the GSP firmware", "RESET_GPU"),
    (120, "GSP_ERROR", "error in the GSP firmware", "RESET_GPU"),
    (121, "C2C_ERROR", "chip-to-chip interconnect error", "IGNORE"),
    (136, "ALI_TRAINING_FAIL", "NVLink link training failed", "RESET_GPU"),
    (137, "NVLINK_PRIV_ERR", "NVLink privilege error", "IGNORE"),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "an uncorrectable ECC error escaped containment", "RESET_GPU"),
    (143, "GPU_INIT_ERROR", "GPU initialisation failed", "RESET_GPU"),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "the driver's recovery action for the GPU changed", "XID_154"),
)

TABLE: dict[int, Xid] = {code: Xid(code, mnemonic, meaning, bucket, _BUCKET.get(bucket, WORKFLOW))
                         for code, mnemonic, meaning, bucket in _ROWS}


RECOVERY_XID = 154
# NVML's GPU recovery action (nvmlDeviceGpuRecoveryAction_t) -> servewatch's action.
RECOVERY_ACTIONS = {0: IGNORE, 1: RESET_GPU, 2: REBOOT, 3: WORKFLOW, 4: RESET_GPU, 5: WORKFLOW, 6: RESET_GPU, 7: REBOOT}


def with_recovery(row: Xid, recovery_action: int) -> Xid:
    """Xid 154 with the action the driver reported (NVML's recovery action); an unknown value is unknown."""
    from servewatch.timeline.samples import RECOVERY_WORDS

    words = RECOVERY_WORDS.get(recovery_action, f"recovery action {recovery_action}")
    return Xid(row.code, row.mnemonic, f"{row.meaning}: {words}", f"recovery action {recovery_action}",
               RECOVERY_ACTIONS.get(recovery_action, UNKNOWN))


def lookup(code: int) -> Xid:
    """The table's row for `code`; an unknown code is reported as unknown, never guessed."""
    found = TABLE.get(code)
    if found is not None:
        return found
    return Xid(code, "UNKNOWN", "unknown Xid (not in servewatch's table)", "UNKNOWN", UNKNOWN)
