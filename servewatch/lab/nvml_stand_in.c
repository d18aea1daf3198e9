/* TEST-ONLY stand-in for NVIDIA's NVML library (libnvidia-ml.so.1). Not NVIDIA's code and not a driver.
 *
 * It exports the NVML functions servewatch calls through nvidia-ml-py (pynvml), with NVML's C signatures and
 * return codes, and answers from a scenario file instead of a GPU, so that servewatch's real pynvml calls run
 * in the fast suite and in the lab on machines without a GPU. servewatch loads it only when the test-only
 * variable SERVEWATCH_TEST_ONLY_NVML names the built library (servewatch/lab/nvml_stand_in.py builds it with
 * the system compiler).
 *
 * SERVEWATCH_TEST_ONLY_NVML_SCENARIO  the scenario file (read at every nvmlInit)
 * SERVEWATCH_TEST_ONLY_NVML_CLOCK     optional: a file holding the scenario time in seconds (tests step it);
 *                                     without it the scenario time is the seconds since nvmlInit
 *
 * Scenario lines ('#' starts a comment):
 *   device INDEX UUID BUS_ID NAME...            a GPU (indices 0..N-1, in order)
 *   at T gpu INDEX KEY=VALUE...                 from scenario time T on, set device fields:
 *        util memutil mem_used mem_total power_mw limit_mw temp sm mem_clock max_sm max_mem reasons
 *        ecc_vol_corr ecc_vol_unc ecc_agg_corr ecc_agg_unc remap_corr remap_unc remap_pending remap_failure
 *        pcie_replay recovery_action nvlink_crc nvlink_replay nvlink_recovery lost
 *      VALUE is a number (reasons may be 0x...), "-" (unset: NVML_ERROR_NOT_SUPPORTED) or "!N" (NVML error N).
 *      lost=1: every call on the device answers NVML_ERROR_GPU_IS_LOST (fallen off the bus).
 *   at T proc INDEX WHO mem=BYTES sm=PCT memutil=PCT    a compute process on the device from T on
 *        WHO: a pid, or title:TITLE (every process whose /proc/PID/cmdline starts with TITLE, e.g. the
 *        process title a vLLM rank sets: title:VLLM::Worker_TP1), or cmdline:TEXT (every process whose
 *        command line, its arguments joined by spaces, contains TEXT)
 *   at T noproc INDEX WHO                       the process leaves the device at T
 *   at T xid INDEX CODE                         an Xid critical error event on the device at T
 * A field never set answers NVML_ERROR_NOT_SUPPORTED, as a device without it does.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_UNKNOWN 999
#define XID_EVENT 0x8ULL

#define MAX_DEV 16
#define MAX_SET 4096
#define MAX_PROC 512
#define MAX_XID 256
#define MAX_PIDS 64

enum field { F_UTIL, F_MEMUTIL, F_MEM_USED, F_MEM_TOTAL, F_POWER, F_LIMIT, F_TEMP, F_SM, F_MEMCLK, F_MAXSM,
             F_MAXMEM, F_REASONS, F_ECC_VC, F_ECC_VU, F_ECC_AC, F_ECC_AU, F_REMAP_C, F_REMAP_U, F_REMAP_P,
             F_REMAP_F, F_REPLAY, F_RECOVERY, F_NVL_CRC, F_NVL_REPLAY, F_NVL_RECOVERY, F_LOST, F_COUNT };
static const char *FIELD_NAMES[F_COUNT] = {"util", "memutil", "mem_used", "mem_total", "power_mw", "limit_mw", "temp",
    "sm", "mem_clock", "max_sm", "max_mem", "reasons", "ecc_vol_corr", "ecc_vol_unc", "ecc_agg_corr", "ecc_agg_unc",
    "remap_corr", "remap_unc", "remap_pending", "remap_failure", "pcie_replay", "recovery_action", "nvlink_crc",
    "nvlink_replay", "nvlink_recovery", "lost"};

typedef struct { int index; char uuid[96]; char bus[32]; char name[96]; } device_t;
typedef struct { double t; int dev; int field; int error; unsigned long long value; } setting_t;
typedef struct { double t; int dev; char who[128]; int present; unsigned long long mem; int sm; int memutil; } proc_t;
typedef struct { double t; int dev; unsigned long long code; int delivered; } xid_t;
typedef struct { unsigned long long mask[MAX_DEV]; } eventset_t;

typedef struct {
    unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId; unsigned int computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
    unsigned int pid; unsigned long long timeStamp; unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
typedef struct {
    void *device; unsigned long long eventType; unsigned long long eventData; unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;
typedef struct { char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; }
    nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int fieldId, scopeId; long long timestamp, latencyUsec; int valueType; int nvmlReturn;
    union { double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal; long long sllVal;
            int siVal; unsigned short usVal; } value;
} nvmlFieldValue_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static device_t devices[MAX_DEV];
static int device_count;
static setting_t settings[MAX_SET];
static int setting_count;
static proc_t procs[MAX_PROC];
static int proc_count;
static xid_t xids[MAX_XID];
static int xid_count;
static int initialized;
static double started;

static double monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double scenario_now(void) {
    const char *path = getenv("SERVEWATCH_TEST_ONLY_NVML_CLOCK");
    if (path && *path) {
        FILE *f = fopen(path, "r");
        double t = 0;
        if (f) {
            if (fscanf(f, "%lf", &t) != 1) t = 0;
            fclose(f);
        }
        return t;
    }
    return monotonic() - started;
}

static unsigned long long parse_number(const char *s) {
    return strtoull(s, NULL, 0);
}

static void parse_line(char *line) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *words[64];
    int n = 0;
    for (char *w = strtok(line, " \t\r\n"); w && n < 64; w = strtok(NULL, " \t\r\n")) words[n++] = w;
    if (n == 0) return;
    if (strcmp(words[0], "device") == 0 && n >= 5 && device_count < MAX_DEV) {
        device_t *d = &devices[device_count++];
        d->index = atoi(words[1]);
        snprintf(d->uuid, sizeof d->uuid, "%s", words[2]);
        snprintf(d->bus, sizeof d->bus, "%s", words[3]);
        d->name[0] = 0;
        for (int i = 4; i < n; i++) {
            if (i > 4) strncat(d->name, " ", sizeof d->name - strlen(d->name) - 1);
            strncat(d->name, words[i], sizeof d->name - strlen(d->name) - 1);
        }
        return;
    }
    if (strcmp(words[0], "at") != 0 || n < 4) return;
    double t = atof(words[1]);
    int dev = atoi(words[3]);
    if (strcmp(words[2], "gpu") == 0) {
        for (int i = 4; i < n && setting_count < MAX_SET; i++) {
            char *eq = strchr(words[i], '=');
            if (!eq) continue;
            *eq = 0;
            for (int f = 0; f < F_COUNT; f++) {
                if (strcmp(words[i], FIELD_NAMES[f]) != 0) continue;
                setting_t *s = &settings[setting_count++];
                s->t = t; s->dev = dev; s->field = f; s->value = 0; s->error = 0;
                if (strcmp(eq + 1, "-") == 0) s->error = NVML_ERROR_NOT_SUPPORTED;
                else if (eq[1] == '!') s->error = atoi(eq + 2);
                else s->value = parse_number(eq + 1);
            }
        }
    } else if ((strcmp(words[2], "proc") == 0 || strcmp(words[2], "noproc") == 0) && n >= 5 && proc_count < MAX_PROC) {
        proc_t *p = &procs[proc_count++];
        memset(p, 0, sizeof *p);
        p->t = t; p->dev = dev; p->present = strcmp(words[2], "proc") == 0; p->sm = -1; p->memutil = -1;
        snprintf(p->who, sizeof p->who, "%s", words[4]);
        for (int i = 5; i < n; i++) {
            if (strncmp(words[i], "mem=", 4) == 0) p->mem = parse_number(words[i] + 4);
            else if (strncmp(words[i], "sm=", 3) == 0) p->sm = atoi(words[i] + 3);
            else if (strncmp(words[i], "memutil=", 8) == 0) p->memutil = atoi(words[i] + 8);
        }
    } else if (strcmp(words[2], "xid") == 0 && n >= 5 && xid_count < MAX_XID) {
        xid_t *x = &xids[xid_count++];
        x->t = t; x->dev = dev; x->code = parse_number(words[4]); x->delivered = 0;
    }
}

static int load_scenario(void) {
    device_count = setting_count = proc_count = xid_count = 0;
    const char *path = getenv("SERVEWATCH_TEST_ONLY_NVML_SCENARIO");
    if (!path || !*path) return NVML_ERROR_UNKNOWN;
    FILE *f = fopen(path, "r");
    if (!f) return NVML_ERROR_UNKNOWN;
    char line[1024];
    while (fgets(line, sizeof line, f)) parse_line(line);
    fclose(f);
    return NVML_SUCCESS;
}

/* The value of a field at the scenario's now: the last setting at or before now (file order among equal times). */
static int field_at(int dev, int field, double now, unsigned long long *value) {
    int found = -1;
    double best = -1e300;
    for (int i = 0; i < setting_count; i++) {
        setting_t *s = &settings[i];
        if (s->dev == dev && s->field == field && s->t <= now && s->t >= best) {
            best = s->t;
            found = i;
        }
    }
    if (found < 0) return NVML_ERROR_NOT_SUPPORTED;
    if (settings[found].error) return settings[found].error;
    *value = settings[found].value;
    return NVML_SUCCESS;
}

static device_t *device_of(void *handle) {
    device_t *d = (device_t *)handle;
    if (d < devices || d >= devices + device_count) return NULL;
    return d;
}

static int lost(int dev, double now) {
    unsigned long long v = 0;
    return field_at(dev, F_LOST, now, &v) == NVML_SUCCESS && v != 0;
}

/* Read one field: the device must exist and be on the bus. */
static int read_field(void *handle, int field, unsigned long long *value) {
    pthread_mutex_lock(&lock);
    int rc;
    device_t *d = device_of(handle);
    if (!initialized) rc = NVML_ERROR_UNINITIALIZED;
    else if (!d) rc = NVML_ERROR_INVALID_ARGUMENT;
    else {
        double now = scenario_now();
        rc = lost(d->index, now) ? NVML_ERROR_GPU_IS_LOST : field_at(d->index, field, now, value);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The pids a WHO names: a number, title:TITLE (the cmdline starts with it) or cmdline:TEXT (contains it). */
static int pids_of(const char *who, unsigned int *out, int max) {
    int by_title = strncmp(who, "title:", 6) == 0, by_cmdline = strncmp(who, "cmdline:", 8) == 0;
    if (!by_title && !by_cmdline) {
        out[0] = (unsigned int)atoi(who);
        return 1;
    }
    const char *text = who + (by_title ? 6 : 8);
    size_t len = strlen(text);
    int n = 0;
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    struct dirent *e;
    while ((e = readdir(proc)) && n < max) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        int match;
        if (by_title) {
            match = got >= len && strncmp(buf, text, len) == 0 && (buf[len] == 0 || buf[len] == ' ');
        } else {
            for (size_t i = 0; i + 1 < got; i++)
                if (buf[i] == 0) buf[i] = ' ';
            match = strstr(buf, text) != NULL;
        }
        if (match) out[n++] = (unsigned int)atoi(e->d_name);
    }
    closedir(proc);
    return n;
}

typedef struct { unsigned int pid; unsigned long long mem; int sm; int memutil; } live_t;

/* The processes on a device at now: for each WHO its last entry at or before now, if present. */
static int live_procs(int dev, double now, live_t *out, int max) {
    int n = 0;
    for (int i = 0; i < proc_count; i++) {
        proc_t *p = &procs[i];
        if (p->dev != dev || p->t > now) continue;
        int later = 0;
        for (int j = 0; j < proc_count; j++)
            if (j != i && procs[j].dev == dev && strcmp(procs[j].who, p->who) == 0 && procs[j].t <= now &&
                (procs[j].t > p->t || (procs[j].t == p->t && j > i)))
                later = 1;
        if (later || !p->present) continue;
        unsigned int pids[MAX_PIDS];
        int k = pids_of(p->who, pids, MAX_PIDS);
        for (int j = 0; j < k && n < max; j++) {
            out[n].pid = pids[j]; out[n].mem = p->mem; out[n].sm = p->sm; out[n].memutil = p->memutil;
            n++;
        }
    }
    return n;
}

/* --- the exported NVML functions ------------------------------------------------------------------------ */

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    int rc = load_scenario();
    if (rc == NVML_SUCCESS) {
        initialized = 1;
        started = monotonic();
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlInit(void) { return nvmlInitWithFlags(0); }

int nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    initialized = 0;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(int result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "servewatch-test-only-stand-in");
    return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *count = (unsigned int)device_count;
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if ((int)index >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

int nvmlDeviceGetIndex(void *handle, unsigned int *index) {
    device_t *d = device_of(handle);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)d->index;
    return NVML_SUCCESS;
}

static int identity(void *handle, const char *what, char *out, unsigned int length) {
    device_t *d = device_of(handle);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    if (lost(d->index, scenario_now())) return NVML_ERROR_GPU_IS_LOST;
    snprintf(out, length, "%s", what);
    return NVML_SUCCESS;
}

int nvmlDeviceGetUUID(void *handle, char *uuid, unsigned int length) {
    device_t *d = device_of(handle);
    return d ? identity(handle, d->uuid, uuid, length) : NVML_ERROR_INVALID_ARGUMENT;
}

int nvmlDeviceGetName(void *handle, char *name, unsigned int length) {
    device_t *d = device_of(handle);
    return d ? identity(handle, d->name, name, length) : NVML_ERROR_INVALID_ARGUMENT;
}

int nvmlDeviceGetPciInfo_v3(void *handle, nvmlPciInfo_t *pci) {
    device_t *d = device_of(handle);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    return identity(handle, d->bus, pci->busId, sizeof pci->busId);
}

int nvmlDeviceGetUtilizationRates(void *handle, nvmlUtilization_t *util) {
    unsigned long long gpu = 0, mem = 0;
    int rc = read_field(handle, F_UTIL, &gpu);
    if (rc) return rc;
    if (read_field(handle, F_MEMUTIL, &mem)) mem = 0;
    util->gpu = (unsigned int)gpu;
    util->memory = (unsigned int)mem;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void *handle, nvmlMemory_t *memory) {
    unsigned long long used = 0, total = 0;
    int rc = read_field(handle, F_MEM_USED, &used);
    if (rc || (rc = read_field(handle, F_MEM_TOTAL, &total))) return rc;
    memory->used = used;
    memory->total = total;
    memory->free = total > used ? total - used : 0;
    return NVML_SUCCESS;
}

static int read_uint(void *handle, int field, unsigned int *out) {
    unsigned long long v = 0;
    int rc = read_field(handle, field, &v);
    if (rc == NVML_SUCCESS) *out = (unsigned int)v;
    return rc;
}

int nvmlDeviceGetPowerUsage(void *handle, unsigned int *mw) { return read_uint(handle, F_POWER, mw); }
int nvmlDeviceGetEnforcedPowerLimit(void *handle, unsigned int *mw) { return read_uint(handle, F_LIMIT, mw); }
int nvmlDeviceGetPcieReplayCounter(void *handle, unsigned int *n) { return read_uint(handle, F_REPLAY, n); }

int nvmlDeviceGetTemperature(void *handle, int sensor, unsigned int *temp) {
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    return read_uint(handle, F_TEMP, temp);
}

int nvmlDeviceGetClockInfo(void *handle, int type, unsigned int *mhz) {
    if (type == 1 || type == 0) return read_uint(handle, F_SM, mhz);       /* SM, graphics */
    if (type == 2) return read_uint(handle, F_MEMCLK, mhz);
    return NVML_ERROR_NOT_SUPPORTED;
}

int nvmlDeviceGetMaxClockInfo(void *handle, int type, unsigned int *mhz) {
    if (type == 1 || type == 0) return read_uint(handle, F_MAXSM, mhz);
    if (type == 2) return read_uint(handle, F_MAXMEM, mhz);
    return NVML_ERROR_NOT_SUPPORTED;
}

int nvmlDeviceGetCurrentClocksEventReasons(void *handle, unsigned long long *reasons) {
    return read_field(handle, F_REASONS, reasons);
}

int nvmlDeviceGetCurrentClocksThrottleReasons(void *handle, unsigned long long *reasons) {
    return read_field(handle, F_REASONS, reasons);
}

int nvmlDeviceGetTotalEccErrors(void *handle, int error_type, int counter_type, unsigned long long *count) {
    int field;
    if (error_type == 0) field = counter_type == 0 ? F_ECC_VC : F_ECC_AC;        /* corrected */
    else if (error_type == 1) field = counter_type == 0 ? F_ECC_VU : F_ECC_AU;   /* uncorrected */
    else return NVML_ERROR_INVALID_ARGUMENT;
    return read_field(handle, field, count);
}

int nvmlDeviceGetRemappedRows(void *handle, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                              unsigned int *failure) {
    int rc = read_uint(handle, F_REMAP_C, corr);
    if (rc || (rc = read_uint(handle, F_REMAP_U, unc)) || (rc = read_uint(handle, F_REMAP_P, pending)) ||
        (rc = read_uint(handle, F_REMAP_F, failure)))
        return rc;
    return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *handle, unsigned int *count, nvmlProcessInfo_t *infos) {
    pthread_mutex_lock(&lock);
    device_t *d = device_of(handle);
    int rc = NVML_SUCCESS;
    if (!d) rc = NVML_ERROR_INVALID_ARGUMENT;
    else {
        double now = scenario_now();
        live_t live[MAX_PIDS];
        int n = lost(d->index, now) ? -1 : live_procs(d->index, now, live, MAX_PIDS);
        if (n < 0) rc = NVML_ERROR_GPU_IS_LOST;
        else if (infos == NULL || *count < (unsigned int)n) {
            rc = n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
            *count = (unsigned int)n;
        } else {
            for (int i = 0; i < n; i++) {
                infos[i].pid = live[i].pid;
                infos[i].usedGpuMemory = live[i].mem;
                infos[i].gpuInstanceId = 0xFFFFFFFFu;
                infos[i].computeInstanceId = 0xFFFFFFFFu;
            }
            *count = (unsigned int)n;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetProcessUtilization(void *handle, nvmlProcessUtilizationSample_t *samples, unsigned int *count,
                                    unsigned long long last_seen) {
    (void)last_seen;
    pthread_mutex_lock(&lock);
    device_t *d = device_of(handle);
    int rc = NVML_SUCCESS;
    if (!d) rc = NVML_ERROR_INVALID_ARGUMENT;
    else {
        double now = scenario_now();
        live_t live[MAX_PIDS];
        int n = lost(d->index, now) ? -1 : live_procs(d->index, now, live, MAX_PIDS);
        int with = 0;
        for (int i = 0; i < n; i++) with += live[i].sm >= 0;
        if (n < 0) rc = NVML_ERROR_GPU_IS_LOST;
        else if (with == 0) rc = NVML_ERROR_NOT_FOUND;          /* NVML: no samples since last_seen */
        else if (samples == NULL || *count < (unsigned int)with) {
            *count = (unsigned int)with;
            rc = NVML_ERROR_INSUFFICIENT_SIZE;
        } else {
            int k = 0;
            for (int i = 0; i < n; i++) {
                if (live[i].sm < 0) continue;
                samples[k].pid = live[i].pid;
                samples[k].timeStamp = (unsigned long long)(now * 1e6);
                samples[k].smUtil = (unsigned int)live[i].sm;
                samples[k].memUtil = live[i].memutil < 0 ? 0 : (unsigned int)live[i].memutil;
                samples[k].encUtil = samples[k].decUtil = 0;
                k++;
            }
            *count = (unsigned int)k;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Field values: the GPU recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 230) and the NVLink error totals
 * (CRC flit 38 and data 45 summed as nvlink_crc, replay 52, recovery 59); any other field: not supported. */
int nvmlDeviceGetFieldValues(void *handle, int count, nvmlFieldValue_t *values) {
    if (!device_of(handle) || count < 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        unsigned long long got = 0;
        int field = -1, uint = 0;
        switch (v->fieldId) {
        case 230: field = F_RECOVERY; uint = 1; break;
        case 38: field = F_NVL_CRC; break;
        case 52: field = F_NVL_REPLAY; break;
        case 59: field = F_NVL_RECOVERY; break;
        case 45: field = -2; break;          /* counted in nvlink_crc */
        }
        v->timestamp = (long long)(monotonic() * 1e6);
        v->latencyUsec = 0;
        if (field == -2) {                   /* data CRC errors: there when the flit counter is, added to it */
            v->nvmlReturn = read_field(handle, F_NVL_CRC, &got);
            v->valueType = 3; v->value.ullVal = 0;
            continue;
        }
        v->nvmlReturn = field < 0 ? NVML_ERROR_NOT_SUPPORTED : read_field(handle, field, &got);
        if (v->nvmlReturn != NVML_SUCCESS) continue;
        if (uint) { v->valueType = 1; v->value.uiVal = (unsigned int)got; }
        else { v->valueType = 3; v->value.ullVal = got; }
    }
    return NVML_SUCCESS;
}

int nvmlEventSetCreate(void **set) {
    eventset_t *s = calloc(1, sizeof *s);
    if (!s) return NVML_ERROR_UNKNOWN;
    *set = s;
    return NVML_SUCCESS;
}

int nvmlEventSetFree(void *set) {
    free(set);
    return NVML_SUCCESS;
}

int nvmlDeviceGetSupportedEventTypes(void *handle, unsigned long long *types) {
    if (!device_of(handle)) return NVML_ERROR_INVALID_ARGUMENT;
    *types = XID_EVENT;
    return NVML_SUCCESS;
}

int nvmlDeviceRegisterEvents(void *handle, unsigned long long types, void *set) {
    device_t *d = device_of(handle);
    if (!d || !set) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~XID_EVENT) return NVML_ERROR_NOT_SUPPORTED;
    ((eventset_t *)set)->mask[d->index] |= types;
    return NVML_SUCCESS;
}

/* Blocks up to timeout_ms for the next Xid event due by the scenario's clock, as the driver's wait does. */
int nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned int timeout_ms) {
    eventset_t *s = (eventset_t *)set;
    double deadline = monotonic() + timeout_ms / 1000.0;
    for (;;) {
        pthread_mutex_lock(&lock);
        double now = scenario_now();
        int found = -1;
        for (int i = 0; i < xid_count; i++) {
            xid_t *x = &xids[i];
            if (!x->delivered && x->t <= now && x->dev < MAX_DEV && (s->mask[x->dev] & XID_EVENT) &&
                (found < 0 || x->t < xids[found].t))
                found = i;
        }
        if (found >= 0) {
            xids[found].delivered = 1;
            data->device = &devices[xids[found].dev];
            data->eventType = XID_EVENT;
            data->eventData = xids[found].code;
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
        }
        pthread_mutex_unlock(&lock);
        if (found >= 0) return NVML_SUCCESS;
        double left = deadline - monotonic();
        if (left <= 0) return NVML_ERROR_TIMEOUT;
        struct timespec nap = {0, (long)((left < 0.01 ? left : 0.01) * 1e9)};
        nanosleep(&nap, NULL);
    }
}
