/* The layout read compiled (servewatch.exposition.layout, issue 54): a scrape laid out as the last one was, its
 * constant pieces compared where expected and each kept sample's value converted, in one C call.
 *
 *     values(text, pieces, slots, tail) -> list[float] | None
 *
 * `text`, every piece and `tail` are ASCII str (the caller checks: a text that is not goes the pure-Python way).
 * For each piece in order: the piece must be found at the position reached (else None), then the rest of its line
 * is a value; the values of the pieces whose slot is true are converted as float() converts them, in text order.
 * After the last value the rest of the text must be `tail`. None where the Python read (Layout._tokens, then
 * float() of each token and its check for '_') gives None: a piece not where expected, a value float() refuses or
 * one holding '_'. A value of digits, signs, '.', 'e' and 'E' only is converted here with PyOS_string_to_double
 * (what float() calls on such text); any other is handed to float() itself (PyFloat_FromString), so the values
 * are float()'s in every case. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define SHORT 64     /* a value this long or longer goes to float() itself */

static int plain_number(const char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E'))
            return 0;
    }
    return 1;
}

/* The value at s[0:n] as float() reads it: 0 and *out set; 1 where float() refuses it (ValueError); -1 on another
 * error (raised). */
static int convert(PyObject *text, Py_ssize_t at, const char *s, Py_ssize_t n, double *out) {
    if (n > 0 && n < SHORT && plain_number(s, n)) {
        char buffer[SHORT];
        memcpy(buffer, s, n);
        buffer[n] = '\0';
        double value = PyOS_string_to_double(buffer, NULL, NULL);
        if (value == -1.0 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_ValueError))
                return -1;
            PyErr_Clear();
            return 1;
        }
        *out = value;
        return 0;
    }
    PyObject *token = PyUnicode_Substring(text, at, at + n);
    if (token == NULL)
        return -1;
    PyObject *number = PyFloat_FromString(token);
    Py_DECREF(token);
    if (number == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    *out = PyFloat_AS_DOUBLE(number);
    Py_DECREF(number);
    return 0;
}

static PyObject *values(PyObject *module, PyObject *args) {
    PyObject *text, *pieces, *slots, *tail;
    if (!PyArg_ParseTuple(args, "UO!O!U:values", &text, &PyTuple_Type, &pieces, &PyTuple_Type, &slots, &tail))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(pieces);
    if (PyTuple_GET_SIZE(slots) != count) {
        PyErr_SetString(PyExc_ValueError, "pieces and slots differ in length");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(text) || !PyUnicode_IS_ASCII(tail)) {
        PyErr_SetString(PyExc_ValueError, "the text and the tail must be ASCII");
        return NULL;
    }
    const char *s = (const char *)PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t position = 0;
    int underscore = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *piece = PyTuple_GET_ITEM(pieces, i);
        if (!PyUnicode_Check(piece) || !PyUnicode_IS_ASCII(piece)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_ValueError, "every piece must be an ASCII str");
            return NULL;
        }
        Py_ssize_t size = PyUnicode_GET_LENGTH(piece);
        if (size > length - position || memcmp(s + position, PyUnicode_DATA(piece), size) != 0)
            goto mismatch;
        position += size;
        const char *newline = memchr(s + position, '\n', length - position);
        Py_ssize_t end = newline != NULL ? newline - s : length;
        int kept = PyObject_IsTrue(PyTuple_GET_ITEM(slots, i));
        if (kept < 0) {
            Py_DECREF(out);
            return NULL;
        }
        if (kept) {
            Py_ssize_t n = end - position;
            if (memchr(s + position, '_', n) != NULL)
                underscore = 1;      /* float() may take it ("1_0"); the Python read then gives None */
            double value;
            int refused = convert(text, position, s + position, n, &value);
            if (refused < 0) {
                Py_DECREF(out);
                return NULL;
            }
            if (refused)
                goto mismatch;
            PyObject *number = PyFloat_FromDouble(value);
            if (number == NULL || PyList_Append(out, number) < 0) {
                Py_XDECREF(number);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(number);
        }
        position = end;
    }
    {
        Py_ssize_t size = PyUnicode_GET_LENGTH(tail);
        if (size != length - position || memcmp(s + position, PyUnicode_DATA(tail), size) != 0)
            goto mismatch;
    }
    if (underscore)
        goto mismatch;
    return out;
mismatch:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"values", values, METH_VARARGS,
     "values(text, pieces, slots, tail) -> the kept values (float()'s) in text order, or None where the text "
     "does not have the layout"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_layout", "The layout read compiled (issue 54).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__layout(void) { return PyModule_Create(&module); }
