/* The proxy's inline read path, compiled (issue 54): servewatch.proxy.server.Upstream._inline_event and
 * _inline_chunks, statement for statement, with StreamState.on_fields and _chunk (the record's per-chunk work)
 * for the stream states registered by setup(). The pure-Python methods stay the reference: server.py uses these
 * only when this module was built (setup.py, an optional extension), and tests/test_proxy_inline.py runs both
 * over the same reads and compares every return value and every attribute they set.
 *
 *   inline_event(up, data, ex, t) -> bool     what Upstream._inline_event(up, data, ex, t) returns
 *   inline_chunks(up, data, ex, t) -> bytes   what Upstream._inline_chunks(up, data, ex, t) returns
 *   setup(state_type, counted_types)
 *   Reader(up)                                Upstream.data_received(up, ...), set on the instance
 *
 * What the C does itself is what the Python does with bytes and ints; where the Python calls out (the regex
 * patterns, a match's groups, int(..., 16) of an unusual size line, bytes.decode, array.append), so does this,
 * through the same objects, so their results and their errors are the same.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#define SIZE_LINES_UP_TO 4096

static PyObject *s_event_eol, *s_event_prefix, *s_event_rest, *s_event_groups, *s_received, *s_max_body,
    *s_whole_event, *s_event_tail, *s_on_fields, *s_groups, *s_start, *s_end, *s_append,
    *s_decode;
static PyObject *zero, *one, *two, *k_max;

/* StreamState's slots, by offset (read from its member descriptors by setup) */
enum { F_KEEP_TEXT, F_PROMPT_TOKENS, F_FINISH_REASON, F_CLIENT_TOKENS, F_COMPLETION_TOKENS, F_COUNTS_EXACT,
       F_CHUNK_T, F_CHUNK_K, F_COUNT };
static const char *slot_names[F_COUNT] = {"keep_text", "prompt_tokens", "finish_reason", "client_tokens",
                                          "completion_tokens", "counts_exact", "chunk_t", "chunk_k"};
static Py_ssize_t offsets[F_COUNT];
static PyObject *counted = NULL;      /* tuple of the types whose on_fields and _chunk are StreamState's */

static PyObject *slot_get(PyObject *obj, int f) {
    PyObject *v = *(PyObject **)((char *)obj + offsets[f]);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'", Py_TYPE(obj)->tp_name,
                     slot_names[f]);
        return NULL;
    }
    return v;   /* borrowed */
}

static void slot_set(PyObject *obj, int f, PyObject *v) {   /* steals nothing */
    PyObject **p = (PyObject **)((char *)obj + offsets[f]);
    PyObject *old = *p;
    Py_INCREF(v);
    *p = v;
    Py_XDECREF(old);
}

/* the offsets of `count` object slots named `names` from `base`'s member descriptors; 0 or -1 */
static int slot_offsets(PyObject *base, const char **names, int count, Py_ssize_t *out) {
    for (int f = 0; f < count; f++) {
        PyObject *d = PyDict_GetItemString(((PyTypeObject *)base)->tp_dict, names[f]);
        if (d == NULL || Py_TYPE(d) != &PyMemberDescr_Type) {
            PyErr_Format(PyExc_TypeError, "%s: not a slot of %.100s", names[f], ((PyTypeObject *)base)->tp_name);
            return -1;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
            PyErr_Format(PyExc_TypeError, "%s: not a writable object slot", names[f]);
            return -1;
        }
        out[f] = m->offset;
    }
    return 0;
}

static int subtypes(PyObject *types, PyObject *base) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); i++)
        if (!PyType_Check(PyTuple_GET_ITEM(types, i)) ||
            !PyType_IsSubtype((PyTypeObject *)PyTuple_GET_ITEM(types, i), (PyTypeObject *)base)) {
            PyErr_SetString(PyExc_TypeError, "the types: the base and its subclasses");
            return 0;
        }
    return 1;
}

static int slot_take(PyObject *obj, int f, PyObject *v) {   /* set the slot to a new reference (NULL: its error) */
    if (v == NULL)
        return -1;
    slot_set(obj, f, v);
    Py_DECREF(v);
    return 0;
}

static int is_counted(PyObject *state) {
    if (counted == NULL)
        return 0;
    PyTypeObject *tp = Py_TYPE(state);
    Py_ssize_t n = PyTuple_GET_SIZE(counted);
    for (Py_ssize_t i = 0; i < n; i++)
        if ((PyObject *)tp == PyTuple_GET_ITEM(counted, i))
            return 1;
    return 0;
}

/* arr.append(v): for an array.array itself, its append's C function called directly (what the method call ends
 * in, without looking the method up on every token); any other object through the method call. New reference. */
static PyTypeObject *array_type = NULL;
static PyCFunction array_append = NULL;

static PyObject *append_to(PyObject *arr, PyObject *v) {
    if (array_append != NULL && Py_TYPE(arr) == array_type)
        return array_append(arr, v);
    return PyObject_CallMethodOneArg(arr, s_append, v);
}

static int find_array_append(void) {   /* array.array and its append's METH_O function; 0 or -1 */
    PyObject *mod = PyImport_ImportModule("array");
    PyObject *tp = mod == NULL ? NULL : PyObject_GetAttrString(mod, "array");
    Py_XDECREF(mod);
    if (tp == NULL)
        return -1;
    PyObject *descr = PyType_Check(tp) ? PyDict_GetItemString(((PyTypeObject *)tp)->tp_dict, "append") : NULL;
    if (descr != NULL && Py_IS_TYPE(descr, &PyMethodDescr_Type)
        && ((PyMethodDescrObject *)descr)->d_method->ml_flags == METH_O) {
        array_type = (PyTypeObject *)tp;     /* (kept: a module's type lives as long as the interpreter) */
        array_append = ((PyMethodDescrObject *)descr)->d_method->ml_meth;
        return 0;
    }
    Py_DECREF(tp);       /* not the array this was written for: the method call, always */
    return 0;
}

/* StreamState.on_fields(piece, reason, pt, ct, t) and _chunk, inline; 0 or -1 */
static int on_fields(PyObject *state, PyObject *piece, PyObject *reason, PyObject *pt, PyObject *ct, PyObject *t) {
    PyObject *keep = is_counted(state) ? slot_get(state, F_KEEP_TEXT) : NULL;
    if (keep == NULL || keep != Py_False) {     /* another type, or text kept: the Python method itself */
        PyErr_Clear();
        PyObject *r = PyObject_CallMethodObjArgs(state, s_on_fields, piece, reason, pt, ct, t, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        return 0;
    }
    if (pt != Py_None && slot_take(state, F_PROMPT_TOKENS, PyNumber_Long(pt)) < 0)
        return -1;
    int truth = PyObject_IsTrue(reason);
    if (truth < 0 || (truth && slot_take(state, F_FINISH_REASON, PyObject_CallMethodNoArgs(reason, s_decode)) < 0))
        return -1;
    int has_text = PyObject_IsTrue(piece);
    if (has_text < 0)
        return -1;
    if (has_text) {
        PyObject *n = slot_get(state, F_CLIENT_TOKENS);
        if (n == NULL || slot_take(state, F_CLIENT_TOKENS, PyNumber_Add(n, one)) < 0)
            return -1;
    }
    PyObject *k;
    if (ct != Py_None) {
        PyObject *count = PyNumber_Long(ct);
        if (count == NULL)
            return -1;
        PyObject *before = slot_get(state, F_COMPLETION_TOKENS);
        PyObject *d = before == NULL ? NULL : PyNumber_Subtract(count, before);
        if (d == NULL) {
            Py_DECREF(count);
            return -1;
        }
        int gt = PyObject_RichCompareBool(d, zero, Py_GT);     /* max(0, d) */
        if (gt < 0) {
            Py_DECREF(count);
            Py_DECREF(d);
            return -1;
        }
        if (gt)
            k = d;
        else {
            Py_DECREF(d);
            k = Py_NewRef(zero);
        }
        slot_set(state, F_COMPLETION_TOKENS, count);
        Py_DECREF(count);
        int over = PyObject_RichCompareBool(k, k_max, Py_GT);     /* CHUNK_K_MAX: kept at the bound, not exact */
        if (over < 0) {
            Py_DECREF(k);
            return -1;
        }
        if (over) {
            Py_SETREF(k, Py_NewRef(k_max));
            slot_set(state, F_COUNTS_EXACT, Py_False);
        }
    } else {
        slot_set(state, F_COUNTS_EXACT, Py_False);
        k = Py_NewRef(has_text ? one : zero);
    }
    PyObject *arr = slot_get(state, F_CHUNK_T);
    PyObject *r = arr == NULL ? NULL : append_to(arr, t);
    if (r == NULL) {
        Py_DECREF(k);
        return -1;
    }
    Py_DECREF(r);
    arr = slot_get(state, F_CHUNK_K);
    r = arr == NULL ? NULL : append_to(arr, k);
    Py_DECREF(k);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* bytes of the printable-ASCII class the transport reads plain ([\x20\x21\x23-\x5b\x5d-\x7e]) */
static int pure(const unsigned char *p, Py_ssize_t start, Py_ssize_t end) {
    for (Py_ssize_t i = start; i < end; i++) {
        unsigned char c = p[i];
        if (c < 0x20 || c > 0x7e || c == 0x22 || c == 0x5c)
            return 0;
    }
    return 1;
}

static Py_ssize_t find_crlf(const char *p, Py_ssize_t from, Py_ssize_t to) {   /* data.find(b"\r\n", from, to) */
    for (Py_ssize_t i = from; i + 1 < to; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return i;
    return -1;
}

static int size_line_is(const char *p, Py_ssize_t n, Py_ssize_t size) {   /* data.startswith(b"%x\r\n" % size) */
    static const char digits[] = "0123456789abcdef";
    char line[24];
    int len = 0;
    char rev[20];
    size_t v = (size_t)size;
    do {
        rev[len++] = digits[v & 15];
        v >>= 4;
    } while (v);
    for (int i = 0; i < len; i++)
        line[i] = rev[len - 1 - i];
    line[len++] = '\r';
    line[len++] = '\n';
    return len <= n && memcmp(p, line, (size_t)len) == 0;
}

static int ends_with(const char *p, Py_ssize_t n, const char *tail, Py_ssize_t len) {
    return len <= n && memcmp(p + n - len, tail, (size_t)len) == 0;
}

/* An Upstream's attributes, read and set in its instance dict where that is what getattr and setattr do: a
 * type with the generic getattr and setattr, an instance dict, and no data descriptor (a property, a slot) for
 * any name read here. Such a type is remembered with its version tag (changed when the type is). Anything else
 * goes through getattr and setattr. */
static PyObject *plain_names[11];
static PyObject *plain_type = NULL;
static unsigned int plain_tag = 0;

static int is_plain(PyTypeObject *tp) {
    if ((PyObject *)tp == plain_type && tp->tp_version_tag == plain_tag
        && PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG))
        return 1;
    if (tp->tp_getattro != PyObject_GenericGetAttr || tp->tp_setattro != PyObject_GenericSetAttr)
        return 0;
#ifdef Py_TPFLAGS_MANAGED_DICT
    if (tp->tp_dictoffset == 0 && !PyType_HasFeature(tp, Py_TPFLAGS_MANAGED_DICT))
        return 0;
#else
    if (tp->tp_dictoffset == 0)
        return 0;
#endif
    for (size_t i = 0; i < sizeof plain_names / sizeof plain_names[0]; i++) {
        PyObject *d = _PyType_Lookup(tp, plain_names[i]);
        if (d != NULL && Py_TYPE(d)->tp_descr_set != NULL)
            return 0;
    }
    if (PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG)) {
        Py_XSETREF(plain_type, Py_NewRef((PyObject *)tp));
        plain_tag = tp->tp_version_tag;
    }
    return 1;
}

/* An Upstream of the types setup_reader was given (servewatch.proxy.server.Upstream, whose __slots__ hold these
 * names): its attributes read and set by their slots' offsets, with no dict lookup. dict_of says so by returning
 * SLOTTED in place of a dict. */
static Py_ssize_t u_offsets[11];
static PyObject *u_types = NULL;
static char slotted_mark;
#define SLOTTED ((PyObject *)&slotted_mark)

static int is_upstream(PyTypeObject *tp) {
    if (u_types == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(u_types); i++)
        if ((PyObject *)tp == PyTuple_GET_ITEM(u_types, i))
            return 1;
    return 0;
}

static int u_index(PyObject *name) {   /* the slot of an interned name read here, or -1 */
    for (int f = 0; f < (int)(sizeof plain_names / sizeof plain_names[0]); f++)
        if (plain_names[f] == name)
            return f;
    return -1;
}

/* SLOTTED (a registered Upstream type), a new reference to the instance dict (a plain type), or NULL without an
 * exception: use getattr. Give it back with dict_done. */
static PyObject *dict_of(PyObject *obj) {
    if (is_upstream(Py_TYPE(obj)))
        return SLOTTED;
    if (!is_plain(Py_TYPE(obj)))
        return NULL;
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (d == NULL)
        PyErr_Clear();
    return d;
}

static void dict_done(PyObject *dict) {
    if (dict != SLOTTED)
        Py_XDECREF(dict);
}

static PyObject *uget(PyObject *obj, PyObject *dict, PyObject *name) {   /* getattr(obj, name) */
    if (dict == SLOTTED) {
        int f = u_index(name);
        if (f >= 0) {
            PyObject *v = *(PyObject **)((char *)obj + u_offsets[f]);
            if (v == NULL) {
                PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%U'", Py_TYPE(obj)->tp_name,
                             name);
                return NULL;
            }
            return Py_NewRef(v);
        }
    } else if (dict != NULL) {
        PyObject *v = PyDict_GetItemWithError(dict, name);
        if (v != NULL)
            return Py_NewRef(v);
        if (PyErr_Occurred())
            return NULL;
    }
    return PyObject_GetAttr(obj, name);
}

static int uset(PyObject *obj, PyObject *dict, PyObject *name, PyObject *v) {   /* setattr(obj, name, v) */
    if (dict == SLOTTED) {
        int f = u_index(name);
        if (f >= 0) {
            PyObject **p = (PyObject **)((char *)obj + u_offsets[f]);
            PyObject *old = *p;
            *p = Py_NewRef(v);
            Py_XDECREF(old);
            return 0;
        }
        return PyObject_SetAttr(obj, name, v);
    }
    return dict != NULL ? PyDict_SetItem(dict, name, v) : PyObject_SetAttr(obj, name, v);
}

/* Exchange's slots, by offset, for the types setup_reader was given; any other type through getattr */
enum { X_LAST, X_FIRST_BYTE, X_CLIENT_GONE, X_STATE, X_SENT, X_COUNT };
static const char *x_names[X_COUNT] = {"last", "first_byte", "client_gone", "state", "sent"};
static PyObject *x_interned[X_COUNT];
static Py_ssize_t x_offsets[X_COUNT];
static PyObject *x_types = NULL;

static int is_exchange(PyObject *ex) {
    if (x_types == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(x_types); i++)
        if ((PyObject *)Py_TYPE(ex) == PyTuple_GET_ITEM(x_types, i))
            return 1;
    return 0;
}

static PyObject *xget(PyObject *ex, int known, int f) {   /* new reference */
    if (!known)
        return PyObject_GetAttr(ex, x_interned[f]);
    PyObject *v = *(PyObject **)((char *)ex + x_offsets[f]);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'", Py_TYPE(ex)->tp_name, x_names[f]);
        return NULL;
    }
    return Py_NewRef(v);
}

static int xset(PyObject *ex, int known, int f, PyObject *v) {
    if (!known)
        return PyObject_SetAttr(ex, x_interned[f], v);
    PyObject **p = (PyObject **)((char *)ex + x_offsets[f]);
    PyObject *old = *p;
    *p = Py_NewRef(v);
    Py_XDECREF(old);
    return 0;
}

static PyObject *set_attr_ssize(PyObject *obj, PyObject *dict, PyObject *name, Py_ssize_t v) {
    PyObject *o = PyLong_FromSsize_t(v);
    if (o == NULL || uset(obj, dict, name, o) < 0) {
        Py_XDECREF(o);
        return NULL;
    }
    return o;
}

/* a match's groups() as a tuple of exactly `n` (what unpacking them into n names requires) */
static PyObject *groups_of(PyObject *m, Py_ssize_t n) {
    PyObject *g = PyObject_CallMethodNoArgs(m, s_groups);
    if (g == NULL)
        return NULL;
    PyObject *t = PySequence_Tuple(g);
    Py_DECREF(g);
    if (t == NULL)
        return NULL;
    if (PyTuple_GET_SIZE(t) != n) {
        PyErr_Format(PyExc_ValueError, "expected %zd values to unpack (got %zd)", n, PyTuple_GET_SIZE(t));
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

static Py_ssize_t call_index(PyObject *m, PyObject *method, PyObject *group) {   /* m.start(g) / m.end(g) */
    PyObject *r = PyObject_CallMethodOneArg(m, method, group);
    if (r == NULL)
        return -1;
    Py_ssize_t v = PyLong_AsSsize_t(r);
    Py_DECREF(r);
    return v;
}

/* the four fields of a match's groups from `first` on: the piece, the reason, the two counts (new references,
 * replacing what the pointers held) */
static void take_groups(PyObject *g, Py_ssize_t first, PyObject **piece, PyObject **reason, PyObject **pt,
                        PyObject **ct) {
    PyObject **out[4] = {piece, reason, pt, ct};
    for (int i = 0; i < 4; i++)
        Py_XSETREF(*out[i], Py_NewRef(PyTuple_GET_ITEM(g, first + i)));
}

/* self.event_rest, self.event_groups = data[at:], (reason, pt, ct); 0 or -1 */
static int keep_rest(PyObject *self, PyObject *udict, PyObject *data, Py_ssize_t at, PyObject *reason,
                     PyObject *pt, PyObject *ct) {
    PyObject *kept = PySequence_GetSlice(data, at, PY_SSIZE_T_MAX);
    PyObject *said = kept == NULL ? NULL : PyTuple_Pack(3, reason, pt, ct);
    int bad = said == NULL || uset(self, udict, s_event_rest, kept) < 0 || uset(self, udict, s_event_groups, said) < 0;
    Py_XDECREF(kept);
    Py_XDECREF(said);
    return bad ? -1 : 0;
}

/* The byte count's arithmetic, `received + size` and `sum <= bound`, in C where both are ints of a machine word
 * (what they are), else through the number protocol as the Python's operators are. */
static PyObject *add_size(PyObject *received, Py_ssize_t size) {   /* new reference */
    if (PyLong_CheckExact(received)) {
        Py_ssize_t r = PyLong_AsSsize_t(received);
        if (!(r == -1 && PyErr_Occurred()) && r <= PY_SSIZE_T_MAX - size)
            return PyLong_FromSsize_t(r + size);
        PyErr_Clear();
    }
    PyObject *size_o = PyLong_FromSsize_t(size);
    PyObject *sum = size_o == NULL ? NULL : PyNumber_Add(received, size_o);
    Py_XDECREF(size_o);
    return sum;
}

static int at_most(PyObject *sum, PyObject *bound) {   /* sum <= bound: 1, 0 or -1 */
    if (PyLong_CheckExact(sum) && PyLong_CheckExact(bound)) {
        Py_ssize_t a = PyLong_AsSsize_t(sum), b = PyLong_AsSsize_t(bound);
        if (!(a == -1 && PyErr_Occurred()) && !(b == -1 && PyErr_Occurred()))
            return a <= b;
        PyErr_Clear();
    }
    return PyObject_RichCompareBool(sum, bound, Py_LE);
}

static PyObject *minus(PyObject *t, PyObject *sent) {   /* t - sent, new reference */
    if (PyFloat_CheckExact(t) && PyFloat_CheckExact(sent))
        return PyFloat_FromDouble(PyFloat_AS_DOUBLE(t) - PyFloat_AS_DOUBLE(sent));
    return PyNumber_Subtract(t, sent);
}

/* Upstream._inline_event over owner[pos:pos+n] (the slice made only where the Python would use it as an
 * object: a pattern's argument, a slice kept): 1 True, 0 False, -1 an exception. */
static int inline_event_in(PyObject *self, PyObject *udict, PyObject *owner, Py_ssize_t pos, Py_ssize_t n,
                           PyObject *ex, PyObject *t) {
    const char *p = PyBytes_AS_STRING(owner) + pos;
    PyObject *data = NULL;      /* owner[pos:pos+n], made once when needed */
    PyObject *size_obj = NULL, *mobj = NULL, *g = NULL;
    PyObject *piece = NULL, *reason = NULL, *pt = NULL, *ct = NULL;
    int result = -1, matched = 0;
#define DATA() (data != NULL ? data : (data = (pos == 0 && n == PyBytes_GET_SIZE(owner)) ? Py_NewRef(owner) \
                                              : PyBytes_FromStringAndSize(p, n)))

    PyObject *eol_obj = uget(self, udict, s_event_eol);
    if (eol_obj == NULL)
        return -1;
    Py_ssize_t eol = PyLong_AsSsize_t(eol_obj);
    Py_DECREF(eol_obj);
    if (eol == -1 && PyErr_Occurred())
        return -1;
    Py_ssize_t size = n - eol - 4;
    if (!(0 <= size && size < SIZE_LINES_UP_TO && size_line_is(p, n, size))) {
        eol = find_crlf(p, 0, n < 10 ? n : 10);
        if (eol <= 0)
            return 0;
        PyObject *line = PyBytes_FromStringAndSize(p, eol);
        if (line == NULL)
            return -1;
        size_obj = PyObject_CallFunction((PyObject *)&PyLong_Type, "Oi", line, 16);   /* int(data[:eol], 16) */
        Py_DECREF(line);
        if (size_obj == NULL) {
            if (PyErr_ExceptionMatches(PyExc_ValueError)) {
                PyErr_Clear();
                return 0;
            }
            return -1;
        }
        int overflow;
        long long parsed = PyLong_AsLongLongAndOverflow(size_obj, &overflow);
        Py_CLEAR(size_obj);
        if (parsed == -1 && PyErr_Occurred())
            return -1;
        if (overflow || parsed != (long long)(n - eol - 4))
            return 0;
        size = (Py_ssize_t)parsed;
        PyObject *o = set_attr_ssize(self, udict, s_event_eol, eol);
        if (o == NULL)
            return -1;
        Py_DECREF(o);
    }
    PyObject *prefix = uget(self, udict, s_event_prefix);
    if (prefix == NULL)
        return -1;
    if (prefix != Py_None) {
        if (!PyBytes_Check(prefix)) {
            PyErr_SetString(PyExc_TypeError, "event_prefix: bytes or None");
            Py_DECREF(prefix);
            return -1;
        }
        Py_ssize_t at = eol + 2, plen = PyBytes_GET_SIZE(prefix);
        int starts = at <= n && plen <= n - at && memcmp(p + at, PyBytes_AS_STRING(prefix), (size_t)plen) == 0;
        Py_DECREF(prefix);
        if (starts) {
            Py_ssize_t start = at + plen;
            PyObject *rest = uget(self, udict, s_event_rest);
            if (rest == NULL)
                return -1;
            if (!PyBytes_Check(rest)) {
                PyErr_SetString(PyExc_TypeError, "event_rest: bytes");
                Py_DECREF(rest);
                return -1;
            }
            Py_ssize_t rlen = PyBytes_GET_SIZE(rest), end = n - rlen;
            int same = end >= start && ends_with(p, n, PyBytes_AS_STRING(rest), rlen)
                       && pure((const unsigned char *)p, start, end);
            Py_DECREF(rest);
            if (same) {
                PyObject *groups = uget(self, udict, s_event_groups);
                if (groups == NULL)
                    return -1;
                g = PySequence_Tuple(groups);
                Py_DECREF(groups);
                if (g == NULL)
                    return -1;
                if (PyTuple_GET_SIZE(g) != 3) {
                    PyErr_Format(PyExc_ValueError, "expected 3 values to unpack (got %zd)", PyTuple_GET_SIZE(g));
                    goto done;
                }
                reason = Py_NewRef(PyTuple_GET_ITEM(g, 0));
                pt = Py_NewRef(PyTuple_GET_ITEM(g, 1));
                ct = Py_NewRef(PyTuple_GET_ITEM(g, 2));
                Py_CLEAR(g);
                piece = Py_NewRef(end > start ? Py_True : Py_False);
                matched = 1;
            } else if (ends_with(p, n, "\n\n\r\n", 4)) {
                if (DATA() == NULL)
                    return -1;
                PyObject *tail = uget(self, udict, s_event_tail);
                if (tail == NULL)
                    goto done;
                PyObject *start_obj = PyLong_FromSsize_t(start);
                mobj = start_obj == NULL ? NULL : PyObject_CallFunctionObjArgs(tail, data, start_obj, NULL);
                Py_DECREF(tail);
                Py_XDECREF(start_obj);
                if (mobj == NULL)
                    goto done;
                if (mobj != Py_None) {
                    g = groups_of(mobj, 4);
                    if (g == NULL)
                        goto done;
                    take_groups(g, 0, &piece, &reason, &pt, &ct);
                    Py_CLEAR(g);
                    Py_ssize_t e1 = call_index(mobj, s_end, one);
                    if (e1 == -1 && PyErr_Occurred())
                        goto done;
                    if (keep_rest(self, udict, data, e1, reason, pt, ct) < 0)
                        goto done;
                    matched = 1;
                }
                Py_CLEAR(mobj);
            }
        }
    } else {
        Py_DECREF(prefix);
    }
    if (!matched && ends_with(p, n, "\n\n\r\n", 4)) {
        if (DATA() == NULL)
            goto done;
        PyObject *whole = uget(self, udict, s_whole_event);
        if (whole == NULL)
            goto done;
        mobj = PyObject_CallOneArg(whole, data);
        Py_DECREF(whole);
        if (mobj == NULL)
            goto done;
        if (mobj != Py_None) {
            g = groups_of(mobj, 5);
            if (g == NULL)
                goto done;
            Py_ssize_t hex_len = PyObject_Length(PyTuple_GET_ITEM(g, 0));
            if (hex_len == -1 && PyErr_Occurred())
                goto done;
            take_groups(g, 1, &piece, &reason, &pt, &ct);
            Py_CLEAR(g);
            if (hex_len != eol) {
                /* (the size line read above is the pattern's: never so) */
            } else if (piece != Py_None) {
                Py_ssize_t s2 = call_index(mobj, s_start, two);
                if (s2 == -1 && PyErr_Occurred())
                    goto done;
                PyObject *kept_prefix = PySequence_GetSlice(data, eol + 2, s2);
                if (kept_prefix == NULL)
                    goto done;
                int bad = uset(self, udict, s_event_prefix, kept_prefix) < 0;
                Py_DECREF(kept_prefix);
                if (bad)
                    goto done;
                Py_ssize_t e2 = call_index(mobj, s_end, two);
                if (e2 == -1 && PyErr_Occurred())
                    goto done;
                if (keep_rest(self, udict, data, e2, reason, pt, ct) < 0)
                    goto done;
                matched = 1;
            } else {
                if (uset(self, udict, s_event_prefix, Py_None) < 0)
                    goto done;
                matched = 1;
            }
        }
    }
    result = 0;
    if (matched) {
        PyObject *received = uget(self, udict, s_received);
        if (received == NULL)
            goto fail;
        PyObject *sum = add_size(received, size);
        Py_DECREF(received);
        if (sum == NULL)
            goto fail;
        PyObject *bound = uget(self, udict, s_max_body);
        int within = bound == NULL ? -1 : at_most(sum, bound);
        Py_XDECREF(bound);
        if (within < 0 || (within && uset(self, udict, s_received, sum) < 0)) {
            Py_DECREF(sum);
            goto fail;
        }
        Py_DECREF(sum);
        if (within) {
            int known = is_exchange(ex);
            PyObject *state = xget(ex, known, X_STATE);
            if (state == NULL)
                goto fail;
            PyObject *sent = xget(ex, known, X_SENT);
            PyObject *dt = sent == NULL ? NULL : minus(t, sent);
            Py_XDECREF(sent);
            int r = dt == NULL ? -1 : on_fields(state, piece, reason, pt, ct, dt);
            Py_DECREF(state);
            Py_XDECREF(dt);
            if (r < 0)
                goto fail;
            result = 1;
        }
    }
    goto done;
fail:
    result = -1;
done:
    Py_XDECREF(data);
    Py_XDECREF(mobj);
    Py_XDECREF(g);
    Py_XDECREF(piece);
    Py_XDECREF(reason);
    Py_XDECREF(pt);
    Py_XDECREF(ct);
    return result;
#undef DATA
}

static int inline_event(PyObject *self, PyObject *owner, Py_ssize_t pos, Py_ssize_t n, PyObject *ex, PyObject *t) {
    PyObject *udict = dict_of(self);
    int r = inline_event_in(self, udict, owner, pos, n, ex, t);
    dict_done(udict);
    return r;
}

static int parse_args(PyObject *const *args, Py_ssize_t nargs, const char *name) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "%s() takes 4 arguments (%zd given)", name, nargs);
        return -1;
    }
    if (!PyBytes_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "%s(): data must be bytes, not %.100s", name, Py_TYPE(args[1])->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *py_inline_event(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (parse_args(args, nargs, "inline_event") < 0)
        return NULL;
    int r = inline_event(args[0], args[1], 0, PyBytes_GET_SIZE(args[1]), args[2], args[3]);
    if (r < 0)
        return NULL;
    return Py_NewRef(r ? Py_True : Py_False);
}

/* Upstream._inline_chunks: the whole chunks at the read's start, each counted while it is one whole event */
static PyObject *py_inline_chunks(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (parse_args(args, nargs, "inline_chunks") < 0)
        return NULL;
    PyObject *data = args[1];
    const char *p = PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), pos = 0;
    while (pos < n) {
        Py_ssize_t to = pos + 10 < n ? pos + 10 : n;
        Py_ssize_t eol = find_crlf(p, pos, to);
        if (eol <= pos)
            break;
        /* int(data[pos:eol], 16) in 0 < size < 4096 whose size line b"%x\r\n" is the one at pos: exactly the
         * lines of 1 to 3 lower-case hex digits without a leading zero */
        Py_ssize_t width = eol - pos, size = 0;
        if (width > 3 || p[pos] == '0')
            break;
        int hex = 1;
        for (Py_ssize_t i = pos; i < eol; i++) {
            char c = p[i];
            if (c >= '0' && c <= '9')
                size = size * 16 + (c - '0');
            else if (c >= 'a' && c <= 'f')
                size = size * 16 + (c - 'a' + 10);
            else {
                hex = 0;
                break;
            }
        }
        if (!hex)
            break;
        Py_ssize_t end = eol + 4 + size;
        if (end > n)
            break;
        int r = inline_event(args[0], data, pos, end - pos, args[2], args[3]);
        if (r < 0)
            return NULL;
        if (r == 0)
            break;
        pos = end;
    }
    if (pos == 0)
        return Py_NewRef(data);
    return PyBytes_FromStringAndSize(p + pos, n - pos);
}

/* setup(StreamState, counted_types): the slots' offsets from StreamState's member descriptors, and the types
 * (StreamState and subclasses that keep its on_fields, _chunk and these slots; server.py checks) counted here */
static PyObject *py_setup(PyObject *module, PyObject *args) {
    PyObject *base, *types;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &base, &PyTuple_Type, &types))
        return NULL;
    Py_ssize_t found[F_COUNT];
    if (slot_offsets(base, slot_names, F_COUNT, found) < 0 || !subtypes(types, base))
        return NULL;
    memcpy(offsets, found, sizeof offsets);
    Py_XSETREF(counted, Py_NewRef(types));
    Py_RETURN_NONE;
}

/* Reader(upstream): Upstream.data_received as a callable the event loop calls with each read, set on the
 * instance (the instance's attribute comes before the class's method): with no Python frame between the loop
 * and the count. What it does is Upstream.data_received's, statement for statement; the Python it calls back
 * (set by setup_reader): the method itself when no exchange is attached, Upstream._parse for what the inline
 * path leaves, the module's _now for the time. */
static PyObject *s_exchange, *s_client_write, *s_inline, *s_now;
static PyObject *py_received = NULL, *py_parse = NULL, *module_globals = NULL;
static PyObject *time_time = NULL;      /* time.time: where _now is it, the time is read here */

/* _now(): time.time() read as time.time reads it (CLOCK_REALTIME, to nanoseconds, then seconds as CPython's
 * _PyTime_AsSecondsDouble rounds them: the same float), without a call; any other _now (a test's clock) called */
static PyObject *now_of(PyObject *now) {
    struct timespec ts;
    if (now == time_time && clock_gettime(CLOCK_REALTIME, &ts) == 0
        && ts.tv_sec < INT64_MAX / 1000000000 - 1 && ts.tv_sec >= 0) {
        int64_t t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        volatile double d;      /* (volatile: rounded as CPython's, which says so too) */
        if (t % 1000000000 == 0)
            d = (double)(t / 1000000000);
        else {
            d = (double)t;
            d /= 1e9;
        }
        return PyFloat_FromDouble(d);
    }
    return PyObject_CallNoArgs(now);
}

typedef struct {
    PyObject_HEAD
    PyObject *up;
    vectorcallfunc vectorcall;
} Reader;

static PyObject *reader_read(Reader *self, PyObject *data) {
    PyObject *up = self->up, *ex = NULL, *t = NULL, *rest = NULL, *r = NULL;
    if (py_received == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup_reader() was not called");
        return NULL;
    }
    PyObject *udict = dict_of(up);
    ex = uget(up, udict, s_exchange);
    if (ex == NULL) {
        dict_done(udict);
        return NULL;
    }
    if (ex == Py_None || !PyBytes_Check(data)) {    /* no exchange (or not bytes): the method itself */
        Py_DECREF(ex);
        dict_done(udict);
        return PyObject_CallFunctionObjArgs(py_received, up, data, NULL);
    }
    PyObject *now = PyDict_GetItemWithError(module_globals, s_now);   /* borrowed */
    if (now == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_NameError, "name '_now' is not defined");
        goto done;
    }
    int known = is_exchange(ex);
    t = now_of(now);
    if (t == NULL || xset(ex, known, X_LAST, t) < 0)
        goto done;
    PyObject *first = xget(ex, known, X_FIRST_BYTE);
    if (first == NULL)
        goto done;
    int unset = first == Py_None;
    Py_DECREF(first);
    if (unset && xset(ex, known, X_FIRST_BYTE, t) < 0)
        goto done;
    PyObject *gone = xget(ex, known, X_CLIENT_GONE);
    int truth = gone == NULL ? -1 : PyObject_IsTrue(gone);
    Py_XDECREF(gone);
    if (truth < 0)
        goto done;
    if (!truth) {
        PyObject *write = uget(up, udict, s_client_write);
        PyObject *w = write == NULL ? NULL : PyObject_CallOneArg(write, data);
        Py_XDECREF(write);
        if (w == NULL)
            goto done;
        Py_DECREF(w);
    }
    PyObject *inl = uget(up, udict, s_inline);
    truth = inl == NULL ? -1 : PyObject_IsTrue(inl);
    Py_XDECREF(inl);
    if (truth < 0)
        goto done;
    if (truth) {
        int counted = inline_event_in(up, udict, data, 0, PyBytes_GET_SIZE(data), ex, t);
        if (counted < 0)
            goto done;
        if (counted) {
            r = Py_NewRef(Py_None);
            goto done;
        }
        PyObject *args[4] = {up, data, ex, t};
        rest = py_inline_chunks(NULL, args, 4);
        if (rest == NULL)
            goto done;
        if (PyBytes_GET_SIZE(rest) == 0) {
            r = Py_NewRef(Py_None);
            goto done;
        }
        data = rest;
    }
    r = PyObject_CallFunctionObjArgs(py_parse, up, data, NULL);
done:
    dict_done(udict);
    Py_XDECREF(ex);
    Py_XDECREF(t);
    Py_XDECREF(rest);
    return r;
}

static PyObject *reader_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "data_received(data): one argument");
        return NULL;
    }
    return reader_read((Reader *)callable, args[0]);
}

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *up;
    if (!PyArg_ParseTuple(args, "O", &up))
        return NULL;
    Reader *self = (Reader *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->up = Py_NewRef(up);
    self->vectorcall = reader_vectorcall;
    return (PyObject *)self;
}

static int reader_traverse(Reader *self, visitproc visit, void *arg) {
    Py_VISIT(self->up);
    return 0;
}

static int reader_clear(Reader *self) {
    Py_CLEAR(self->up);
    return 0;
}

static void reader_dealloc(Reader *self) {
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *reader_repr(Reader *self) {
    return PyUnicode_FromString("<compiled data_received>");
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "servewatch.proxy._inline.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Reader(upstream): upstream.data_received, compiled",
    .tp_new = reader_new,
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_vectorcall_offset = offsetof(Reader, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)reader_repr,
};

/* setup_reader(Upstream.data_received, Upstream._parse, server module's globals, Exchange, exchange_types,
 * Upstream, upstream_types): the Python the Reader calls back, and the exchange and upstream types whose slots it
 * reads by offset (Exchange, Upstream and subclasses that keep these slots; server.py checks) */
static PyObject *py_setup_reader(PyObject *module, PyObject *args) {
    PyObject *received, *parse, *globals, *xbase, *xtypes, *ubase, *utypes;
    Py_ssize_t found[X_COUNT], ufound[sizeof u_offsets / sizeof u_offsets[0]];
    const char *unames[sizeof u_offsets / sizeof u_offsets[0]];
    if (!PyArg_ParseTuple(args, "OOO!O!O!O!O!", &received, &parse, &PyDict_Type, &globals, &PyType_Type, &xbase,
                          &PyTuple_Type, &xtypes, &PyType_Type, &ubase, &PyTuple_Type, &utypes))
        return NULL;
    for (size_t f = 0; f < sizeof unames / sizeof unames[0]; f++)
        if ((unames[f] = PyUnicode_AsUTF8(plain_names[f])) == NULL)
            return NULL;
    if (slot_offsets(xbase, x_names, X_COUNT, found) < 0 || !subtypes(xtypes, xbase)
        || slot_offsets(ubase, unames, (int)(sizeof unames / sizeof unames[0]), ufound) < 0 || !subtypes(utypes, ubase))
        return NULL;
    memcpy(x_offsets, found, sizeof x_offsets);
    memcpy(u_offsets, ufound, sizeof u_offsets);
    Py_XSETREF(x_types, Py_NewRef(xtypes));
    Py_XSETREF(u_types, Py_NewRef(utypes));
    Py_XSETREF(py_received, Py_NewRef(received));
    Py_XSETREF(py_parse, Py_NewRef(parse));
    Py_XSETREF(module_globals, Py_NewRef(globals));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup_reader", py_setup_reader, METH_VARARGS,
     "setup_reader(Upstream.data_received, Upstream._parse, server's globals, Exchange, exchange_types, Upstream, "
     "upstream_types)"},
    {"inline_event", (PyCFunction)(void (*)(void))py_inline_event, METH_FASTCALL,
     "inline_event(upstream, data, exchange, t) -> bool: Upstream._inline_event, compiled"},
    {"inline_chunks", (PyCFunction)(void (*)(void))py_inline_chunks, METH_FASTCALL,
     "inline_chunks(upstream, data, exchange, t) -> bytes: Upstream._inline_chunks, compiled"},
    {"setup", py_setup, METH_VARARGS, "setup(StreamState, counted_types): the states counted without a call"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_inline", "The proxy's inline read path, compiled.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__inline(void) {
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_event_eol, "event_eol");
    INTERN(s_event_prefix, "event_prefix");
    INTERN(s_event_rest, "event_rest");
    INTERN(s_event_groups, "event_groups");
    INTERN(s_received, "_received");
    INTERN(s_max_body, "max_body");
    INTERN(s_whole_event, "whole_event");
    INTERN(s_event_tail, "event_tail");
    INTERN(s_on_fields, "on_fields");
    INTERN(s_groups, "groups");
    INTERN(s_start, "start");
    INTERN(s_end, "end");
    INTERN(s_append, "append");
    INTERN(s_decode, "decode");
    INTERN(s_exchange, "exchange");
    INTERN(s_client_write, "client_write");
    INTERN(s_inline, "inline");
    INTERN(s_now, "_now");
    for (int f = 0; f < X_COUNT; f++)
        INTERN(x_interned[f], x_names[f]);
    PyObject *plain[] = {s_exchange, s_client_write, s_inline, s_event_eol, s_event_prefix, s_event_rest,
                         s_event_groups, s_whole_event, s_event_tail, s_received, s_max_body};
    memcpy(plain_names, plain, sizeof plain_names);
#undef INTERN
    zero = PyLong_FromLong(0);
    one = PyLong_FromLong(1);
    two = PyLong_FromLong(2);
    k_max = PyLong_FromUnsignedLong(0xFFFFFFFFUL);    /* stream.py's CHUNK_K_MAX */
    if (zero == NULL || one == NULL || two == NULL || k_max == NULL)
        return NULL;
    if (PyType_Ready(&ReaderType) < 0 || find_array_append() < 0)
        return NULL;
    PyObject *time_mod = PyImport_ImportModule("time");
    time_time = time_mod == NULL ? NULL : PyObject_GetAttrString(time_mod, "time");
    Py_XDECREF(time_mod);
    if (time_time == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
