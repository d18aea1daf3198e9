/* The proxy's compiled pump (issue 54): a streamed response's body moved from the upstream's socket to the
 * client's by one native thread, out of the event loop.
 *
 * Once a response's head has been read and forwarded in Python and its chunked SSE body is between chunks
 * (servewatch.proxy.server.Upstream._maybe_pump), the two sockets (each dup'ed: the pump holds its own
 * descriptors, so a socket the loop closes is never one the pump reuses) go to the pump thread, which runs one
 * epoll over every pumped upstream socket with no GIL held. Each read is written to the client as it comes
 * and kept, with its time (time.time()'s clock and rounding), in buffers that grow. Python is woken (an
 * eventfd its loop reads, one Hub per proxy) only when a pump stops:
 *   END        the chunked body's last chunk ("0\r\n\r\n" with no trailer) ended a read: that chunk is not sent
 *              (what is sent stops before it), Python sends it once it has counted the reads;
 *   FRAMING    the framing took a turn this reader does not follow (an extension, a trailer, bytes after the
 *              end): the parser in Python reads it;
 *   SLOW       the client did not take a whole read at once: the rest goes through the loop's transport, and
 *              its backpressure takes over (nothing is buffered here beyond the read in hand);
 *   CLIENT     a write to the client failed (its errno: the transport meets it again writing the rest);
 *   UPSTREAM   the upstream closed, reset or errored: not read here, so the loop reads it as before;
 *   LIMIT      the bytes it read since it started reached the bound it was given (the response's size bound,
 *              or what one pump moves at most before Python starts it again);
 * or when Python takes it back itself (Pump.take: a client gone, the proxy closing).
 * Python then replays the reads, in order, with their times, through the same counting path a read of the
 * loop takes (Upstream.unpump): the record is what the loop's reads would have made.
 *
 * Python also counts a running pump's reads before its end (Pump.drain: the reads kept so far handed over, the
 * pump moving the stream on): when the reads of all the hub's pumps since Python last counted them reach the
 * hub's `drain_every`, the thread says so through the eventfd (Hub.drain_due). So no stream's reads wait for
 * its end to be counted: streams that end together (as an engine's batch does) would otherwise have Python
 * replay each one's whole body at that moment, while the clients' next requests wait behind it.
 *
 * Locking: one mutex for the thread's table of pumps and every pump's buffers. The thread never takes the
 * GIL; Python holds the GIL while it waits for the mutex (the thread holds it only over nonblocking calls). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_SIZE 65536
enum { RUNNING = 0, R_END = 1, R_FRAMING, R_SLOW, R_CLIENT, R_UPSTREAM, R_LIMIT, R_TAKEN };
enum { F_SIZE, F_DATA, F_CRLF, F_LAST };

typedef struct Hub {
    PyObject_HEAD
    int efd;
    long long *done;        /* the idents of pumps stopped since Hub.done() last took them */
    size_t ndone, capdone;
    size_t every, kept;     /* reads (all its pumps') between two drains asked for; reads since the last */
    int due;                /* a drain asked for and not yet taken (Hub.drain_due) */
} Hub;

typedef struct {
    PyObject_HEAD
    Hub *hub;
    long long ident;
    int up, cl;             /* the pump's own descriptors, -1 once closed */
    int reason, err;
    uint32_t slot, gen;
    char *buf;
    size_t len, cap, sent, limit, total;    /* total: bytes read since it started (limit bounds it) */
    double *times;
    size_t *ends, nreads, capreads;
    double last;
    /* chunked framing: where the last read left it */
    int f, digits, cr;
    size_t left, size;
} Pump;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int epfd = -1;
static Pump **slots = NULL;
static uint32_t *gens = NULL;
static size_t nslots = 0;

/* time.time(): CLOCK_REALTIME to nanoseconds, then seconds as CPython rounds them (_inline.c's now_of) */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    volatile double d;
    if (t % 1000000000 == 0)
        d = (double)(t / 1000000000);
    else {
        d = (double)t;
        d /= 1e9;
    }
    return d;
}

/* the framing after `n` more bytes: 0 go on, 1 the body ended with the last of them, -1 a turn not followed */
static int frame(Pump *p, const char *d, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (p->f == F_DATA) {
            size_t k = n - i < p->left ? n - i : p->left;
            i += k;
            p->left -= k;
            if (p->left == 0) {
                p->f = F_CRLF;
                p->cr = 0;
            }
            continue;
        }
        char c = d[i++];
        if (p->f == F_CRLF || p->f == F_LAST) {
            if (c != (p->cr ? '\n' : '\r'))
                return -1;
            if (!p->cr) {
                p->cr = 1;
                continue;
            }
            if (p->f == F_LAST)
                return i == n ? 1 : -1;
            p->f = F_SIZE;
            p->digits = p->cr = 0;
            p->size = 0;
            continue;
        }
        /* F_SIZE: hex digits, CR, LF */
        if (p->cr) {
            if (c != '\n')
                return -1;
            p->cr = 0;
            if (p->size == 0)
                p->f = F_LAST;
            else {
                p->f = F_DATA;
                p->left = p->size;
            }
            continue;
        }
        int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (v >= 0) {
            if (++p->digits > 8)
                return -1;
            p->size = p->size * 16 + (size_t)v;
        } else if (c == '\r' && p->digits > 0)
            p->cr = 1;
        else
            return -1;
    }
    return 0;
}

static void wake(Hub *h) {
    if (h->efd >= 0) {              /* (a hub closed meanwhile is told nothing: hub_close sets -1 locked) */
        uint64_t one = 1;
        ssize_t w = write(h->efd, &one, sizeof one);
        (void)w;
    }
}

/* under the mutex: out of the epoll and the table, descriptors closed, the hub told (unless Python took it) */
static void stop(Pump *p, int reason, int err) {
    if (p->reason != RUNNING)
        return;
    p->reason = reason;
    p->err = err;
    if (p->up >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, p->up, NULL);
        close(p->up);
        p->up = -1;
    }
    if (p->cl >= 0) {
        close(p->cl);
        p->cl = -1;
    }
    slots[p->slot] = NULL;
    if (reason != R_TAKEN) {
        Hub *h = p->hub;
        if (h->ndone == h->capdone) {
            size_t cap = h->capdone ? 2 * h->capdone : 16;
            long long *done = realloc(h->done, cap * sizeof *done);
            if (done == NULL)
                abort();        /* (a few bytes a stream: no way to go on without telling Python) */
            h->done = done;
            h->capdone = cap;
        }
        h->done[h->ndone++] = p->ident;
        wake(h);
    }
}

static int grow(Pump *p) {
    if (p->cap - p->len < READ_SIZE) {
        size_t cap = p->cap ? 2 * p->cap : 4 * READ_SIZE;
        while (cap - p->len < READ_SIZE)
            cap *= 2;
        char *buf = realloc(p->buf, cap);
        if (buf == NULL)
            return -1;
        p->buf = buf;
        p->cap = cap;
    }
    if (p->nreads == p->capreads) {
        size_t cap = p->capreads ? 2 * p->capreads : 256;
        double *times = realloc(p->times, cap * sizeof *times);
        if (times == NULL)
            return -1;
        p->times = times;
        size_t *ends = realloc(p->ends, cap * sizeof *ends);
        if (ends == NULL)
            return -1;
        p->ends = ends;
        p->capreads = cap;
    }
    return 0;
}

static void readable(Pump *p, uint32_t events) {
    if (events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
        stop(p, R_UPSTREAM, 0);             /* not read: the loop reads what is left and the end itself */
        return;
    }
    if (grow(p) < 0) {
        stop(p, R_LIMIT, ENOMEM);
        return;
    }
    ssize_t n = recv(p->up, p->buf + p->len, READ_SIZE, MSG_DONTWAIT);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            stop(p, R_UPSTREAM, errno);
        return;
    }
    if (n == 0) {                           /* (an end the loop reads again: a TCP end stays read) */
        stop(p, R_UPSTREAM, 0);
        return;
    }
    double t = now();
    size_t from = p->len;
    p->len += (size_t)n;
    p->total += (size_t)n;
    Hub *h = p->hub;
    if (h->every && ++h->kept >= h->every && !h->due) {     /* Python asked to count what all pumps read */
        h->due = 1;
        wake(h);
    }
    p->times[p->nreads] = t;
    p->ends[p->nreads++] = p->len;
    p->last = t;
    /* The body's last chunk ("0\r\n\r\n", its size line's digits as read) is not sent here: Python sends it once
     * it has counted the reads (Upstream.unpump), so a client that sends its next request the moment it has a
     * response's end finds the exchange ended and counted, not one still open behind the pump's hand-back. */
    int fr = frame(p, p->buf + from, (size_t)n);
    size_t out = (size_t)n;
    if (fr > 0)
        out -= (size_t)p->digits + 4 < out ? (size_t)p->digits + 4 : out;
    ssize_t w = out ? send(p->cl, p->buf + from, out, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            stop(p, R_CLIENT, errno);
            return;
        }
        w = 0;
    }
    p->sent += (size_t)w;
    if ((size_t)w < out) {
        stop(p, R_SLOW, 0);
        return;
    }
    if (fr)
        stop(p, fr > 0 ? R_END : R_FRAMING, 0);
    else if (p->total >= p->limit)
        stop(p, R_LIMIT, 0);
}

static void *run(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);     /* signals are the main thread's (Python's handlers) */
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(epfd, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        pthread_mutex_lock(&mu);
        for (int i = 0; i < n; i++) {
            uint64_t key = evs[i].data.u64;
            uint32_t slot = (uint32_t)(key >> 32), gen = (uint32_t)key;
            /* a pump stopped between the wait and the lock is out of the table (or its slot reused: gen) */
            if (slot < nslots && slots[slot] != NULL && gens[slot] == gen)
                readable(slots[slot], evs[i].events);
        }
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* a forked child has no pump thread: its pumps start a thread and an epoll of their own (the parent's
 * pumps are the parent's; their descriptors' copies are closed as the child's Python drops them) */
static void forked(void) {
    pthread_mutex_init(&mu, NULL);
    if (epfd >= 0)
        close(epfd);
    epfd = -1;
    for (size_t k = 0; k < nslots; k++)
        slots[k] = NULL;
}

static int started(void) {
    static int atfork = 0;
    if (!atfork && pthread_atfork(NULL, NULL, forked) == 0)
        atfork = 1;
    if (epfd >= 0)
        return 0;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        return -1;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int rc = pthread_create(&th, &attr, run, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        close(epfd);
        epfd = -1;
        errno = rc;
        return -1;
    }
    return 0;
}

static PyTypeObject PumpType;

/* Hub.pump(ident, upstream_fd, client_fd, limit): start pumping; OSError where it cannot */
static PyObject *hub_pump(Hub *self, PyObject *args) {
    long long ident;
    int up_fd, cl_fd;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "Liin", &ident, &up_fd, &cl_fd, &limit))
        return NULL;
    if (self->efd < 0) {
        PyErr_SetString(PyExc_ValueError, "the hub is closed");
        return NULL;
    }
    Pump *p = PyObject_New(Pump, &PumpType);
    if (p == NULL)
        return NULL;
    Py_INCREF(self);
    p->hub = self;
    p->ident = ident;
    p->up = p->cl = -1;
    p->reason = R_TAKEN;                    /* (not running until it is in the table) */
    p->err = 0;
    p->buf = NULL;
    p->len = p->cap = p->sent = p->total = 0;
    p->limit = limit > 0 ? (size_t)limit : 1;
    p->times = NULL;
    p->ends = NULL;
    p->nreads = p->capreads = 0;
    p->last = 0.0;
    p->f = F_SIZE;
    p->digits = p->cr = 0;
    p->left = p->size = 0;
    p->slot = p->gen = 0;
    pthread_mutex_lock(&mu);
    int err = 0;
    if (started() < 0)
        err = errno;
    else {
        p->up = fcntl(up_fd, F_DUPFD_CLOEXEC, 0);
        p->cl = p->up < 0 ? -1 : fcntl(cl_fd, F_DUPFD_CLOEXEC, 0);
        if (p->up < 0 || p->cl < 0)
            err = errno;
    }
    size_t slot = 0;
    if (!err) {
        while (slot < nslots && slots[slot] != NULL)
            slot++;
        if (slot == nslots) {
            size_t n = nslots ? 2 * nslots : 64;
            Pump **s = realloc(slots, n * sizeof *s);
            if (s != NULL)
                slots = s;
            uint32_t *g = s == NULL ? NULL : realloc(gens, n * sizeof *g);
            if (g != NULL) {
                gens = g;
                for (size_t k = nslots; k < n; k++) {
                    slots[k] = NULL;
                    gens[k] = 0;
                }
                nslots = n;
            } else
                err = ENOMEM;
        }
    }
    if (!err) {
        p->slot = (uint32_t)slot;
        p->gen = ++gens[slot];
        struct epoll_event ev;
        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.u64 = ((uint64_t)slot << 32) | p->gen;
        slots[slot] = p;
        p->reason = RUNNING;
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, p->up, &ev) < 0) {
            err = errno;
            slots[slot] = NULL;
            p->reason = R_TAKEN;
        }
    }
    if (err) {
        if (p->up >= 0)
            close(p->up);
        if (p->cl >= 0)
            close(p->cl);
        p->up = p->cl = -1;
    }
    pthread_mutex_unlock(&mu);
    if (err) {
        Py_DECREF(p);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return (PyObject *)p;
}

/* Hub.done(): the idents of the pumps that stopped by themselves since the last call (the eventfd drained) */
static PyObject *hub_done(Hub *self, PyObject *unused) {
    (void)unused;
    uint64_t count;
    if (self->efd >= 0) {
        ssize_t r = read(self->efd, &count, sizeof count);
        (void)r;
    }
    pthread_mutex_lock(&mu);
    size_t n = self->ndone;
    long long *copy = n ? malloc(n * sizeof *copy) : NULL;
    if (copy != NULL)
        memcpy(copy, self->done, n * sizeof *copy);
    if (copy != NULL || n == 0)
        self->ndone = 0;
    pthread_mutex_unlock(&mu);
    if (n && copy == NULL)
        return PyErr_NoMemory();
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out != NULL && i < n; i++) {
        PyObject *v = PyLong_FromLongLong(copy[i]);
        if (v == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    free(copy);
    return out;
}

/* Hub.drain_due(): whether the thread asked for a drain (drain_every reads since the last) since the last call;
 * the count starts again */
static PyObject *hub_drain_due(Hub *self, PyObject *unused) {
    (void)unused;
    pthread_mutex_lock(&mu);
    int due = self->due;
    if (due)
        self->due = 0;
    self->kept = 0;
    pthread_mutex_unlock(&mu);
    return PyBool_FromLong(due);
}

static PyObject *hub_close(Hub *self, PyObject *unused) {
    (void)unused;
    pthread_mutex_lock(&mu);
    int fd = self->efd;
    self->efd = -1;
    pthread_mutex_unlock(&mu);
    if (fd >= 0)
        close(fd);
    Py_RETURN_NONE;
}

static PyObject *hub_fd(Hub *self, void *closure) {
    (void)closure;
    return PyLong_FromLong(self->efd);
}

static PyObject *hub_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"drain_every", NULL};
    Py_ssize_t every = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n:Hub", names, &every))
        return NULL;
    if (every < 0) {
        PyErr_SetString(PyExc_ValueError, "drain_every must be 0 (never) or more");
        return NULL;
    }
    Hub *h = (Hub *)type->tp_alloc(type, 0);
    if (h == NULL)
        return NULL;
    h->done = NULL;
    h->ndone = h->capdone = 0;
    h->every = (size_t)every;
    h->kept = 0;
    h->due = 0;
    h->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(h);
        return NULL;
    }
    return (PyObject *)h;
}

static void hub_dealloc(Hub *self) {
    if (self->efd >= 0)
        close(self->efd);
    free(self->done);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef hub_methods[] = {
    {"pump", (PyCFunction)hub_pump, METH_VARARGS, "pump(ident, upstream_fd, client_fd, limit) -> Pump"},
    {"done", (PyCFunction)hub_done, METH_NOARGS, "the idents of the pumps stopped since the last call"},
    {"drain_due", (PyCFunction)hub_drain_due, METH_NOARGS,
     "whether drain_every reads were made since the last call (the count starts again)"},
    {"close", (PyCFunction)hub_close, METH_NOARGS, "close the eventfd"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef hub_getset[] = {{"fd", (getter)hub_fd, NULL, "the eventfd the loop reads", NULL},
                                   {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject HubType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "servewatch.proxy._pump.Hub",
    .tp_basicsize = sizeof(Hub),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = hub_new,
    .tp_dealloc = (destructor)hub_dealloc,
    .tp_methods = hub_methods,
    .tp_getset = hub_getset,
};

/* Pump.take(): stop it (if it still runs) and hand over (data, ends, times, sent, reason, errno): the reads
 * kept, each read's end in data and its time, how much of data the client was sent, why it stopped */
/* the reads' ends and times as two lists (new references in *el and *tl; -1 with an error set, none made) */
static int read_lists(const size_t *ends, const double *times, size_t n, PyObject **el, PyObject **tl) {
    *el = PyList_New((Py_ssize_t)n);
    *tl = PyList_New((Py_ssize_t)n);
    if (*el == NULL || *tl == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        PyObject *e = PyLong_FromSize_t(ends[i]), *t = PyFloat_FromDouble(times[i]);
        if (e == NULL || t == NULL) {
            Py_XDECREF(e);
            Py_XDECREF(t);
            goto fail;
        }
        PyList_SET_ITEM(*el, (Py_ssize_t)i, e);
        PyList_SET_ITEM(*tl, (Py_ssize_t)i, t);
    }
    return 0;
fail:
    Py_CLEAR(*el);
    Py_CLEAR(*tl);
    return -1;
}

static PyObject *pump_take(Pump *p, PyObject *unused) {
    (void)unused;
    pthread_mutex_lock(&mu);
    if (p->reason == RUNNING)
        stop(p, R_TAKEN, 0);
    pthread_mutex_unlock(&mu);
    PyObject *data = PyBytes_FromStringAndSize(p->buf, (Py_ssize_t)p->len);
    PyObject *ends = NULL, *times = NULL, *out = NULL;
    if (data == NULL || read_lists(p->ends, p->times, p->nreads, &ends, &times) < 0)
        goto done;
    out = Py_BuildValue("(OOOnii)", data, ends, times, (Py_ssize_t)p->sent, p->reason, p->err);
    /* what was handed over is Python's now: the buffers start again empty */
    p->len = p->sent = p->nreads = 0;
done:
    Py_XDECREF(data);
    Py_XDECREF(ends);
    Py_XDECREF(times);
    return out;
}

/* Pump.drain(): a running pump's reads kept so far, (data, ends, times), handed over (each sent whole: a read the
 * client did not take whole stops the pump), the pump moving the stream on; None where it kept none or stopped
 * (take hands over a stopped pump's reads) */
static PyObject *pump_drain(Pump *p, PyObject *unused) {
    (void)unused;
    PyObject *data = NULL, *el = NULL, *tl = NULL, *out = NULL;
    double *times = NULL;
    size_t *ends = NULL;
    pthread_mutex_lock(&mu);
    size_t n = p->nreads;
    if (p->reason != RUNNING || n == 0) {
        pthread_mutex_unlock(&mu);
        Py_RETURN_NONE;
    }
    data = PyBytes_FromStringAndSize(p->buf, (Py_ssize_t)p->len);
    times = malloc(n * sizeof *times);
    ends = malloc(n * sizeof *ends);
    if (data != NULL && times != NULL && ends != NULL) {
        memcpy(times, p->times, n * sizeof *times);
        memcpy(ends, p->ends, n * sizeof *ends);
        p->len = p->sent = p->nreads = 0;       /* (handed over: the buffers start again empty) */
    }
    pthread_mutex_unlock(&mu);
    if (data == NULL || times == NULL || ends == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    if (read_lists(ends, times, n, &el, &tl) == 0)
        out = PyTuple_Pack(3, data, el, tl);
done:
    free(times);
    free(ends);
    Py_XDECREF(data);
    Py_XDECREF(el);
    Py_XDECREF(tl);
    return out;
}

static PyObject *pump_last(Pump *p, void *closure) {
    (void)closure;
    pthread_mutex_lock(&mu);
    double last = p->last;
    pthread_mutex_unlock(&mu);
    return PyFloat_FromDouble(last);
}

static PyObject *pump_running(Pump *p, void *closure) {
    (void)closure;
    pthread_mutex_lock(&mu);
    int running = p->reason == RUNNING;
    pthread_mutex_unlock(&mu);
    return PyBool_FromLong(running);
}

static void pump_dealloc(Pump *p) {
    pthread_mutex_lock(&mu);
    if (p->reason == RUNNING)
        stop(p, R_TAKEN, 0);
    pthread_mutex_unlock(&mu);
    free(p->buf);
    free(p->times);
    free(p->ends);
    Py_XDECREF(p->hub);
    PyObject_Free(p);
}

static PyMethodDef pump_methods[] = {
    {"take", (PyCFunction)pump_take, METH_NOARGS,
     "stop (if running) and hand over (data, ends, times, sent, reason, errno)"},
    {"drain", (PyCFunction)pump_drain, METH_NOARGS,
     "a running pump's reads kept so far, (data, ends, times), the pump going on; None where none or stopped"},
    {NULL, NULL, 0, NULL}};

static PyObject *pump_ident(Pump *p, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(p->ident);
}

static PyGetSetDef pump_getset[] = {
    {"ident", (getter)pump_ident, NULL, "what the hub's done() says of it", NULL},
    {"last", (getter)pump_last, NULL, "the time of the last read (0.0: none yet)", NULL},
    {"running", (getter)pump_running, NULL, "whether it still pumps", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject PumpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "servewatch.proxy._pump.Pump",
    .tp_basicsize = sizeof(Pump),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)pump_dealloc,
    .tp_methods = pump_methods,
    .tp_getset = pump_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "servewatch.proxy._pump",
                                    "The proxy's compiled pump (see servewatch.proxy.server.Upstream.unpump).",
                                    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__pump(void) {
    if (PyType_Ready(&HubType) < 0 || PyType_Ready(&PumpType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&HubType);
    if (PyModule_AddObject(m, "Hub", (PyObject *)&HubType) < 0
        || PyModule_AddIntConstant(m, "END", R_END) < 0 || PyModule_AddIntConstant(m, "FRAMING", R_FRAMING) < 0
        || PyModule_AddIntConstant(m, "SLOW", R_SLOW) < 0 || PyModule_AddIntConstant(m, "CLIENT", R_CLIENT) < 0
        || PyModule_AddIntConstant(m, "UPSTREAM", R_UPSTREAM) < 0 || PyModule_AddIntConstant(m, "LIMIT", R_LIMIT) < 0
        || PyModule_AddIntConstant(m, "TAKEN", R_TAKEN) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
