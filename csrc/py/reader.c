/*
 * reader.c -- bus1py._messages.NodeReader: the receive of a stream of messages for one
 * node of a peer, numbered by their sender's consecutive sequence (a topic's subscription,
 * bus1py/topic.py), as one call in C: `reader(timeout=None)`.
 *
 * Why in C: a subscription's receive is the peer's receive for one node (peer.c) and a
 * check of the message's sequence; as a Python method around it, its frame cost about as
 * much as the receive itself.
 *
 * Invariants:
 *   - The fast form returns the message the peer's `recv(timeout, node=node)` returns when
 *     it is a `data` message whose sequence (msg.stamp[2]) is `last` + 1, and sets `last`
 *     to it.  Every other message -- a notice, the first one, one after a gap -- goes to
 *     `other(msg)`, whose return value is the call's: the owner keeps `last` and counts
 *     the gaps there, so nothing is counted in two places.
 *   - Arguments other than one timeout (positional or named) go to `slow(*args, **kw)`
 *     unchanged, as does everything once the owner has dropped the reader.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "messages.h"

typedef struct {
    PyObject_HEAD
    PyObject *peer, *node, *data, *other, *slow;
    long long last; /* the sequence of the last message returned; -2: none yet */
    vectorcallfunc vectorcall;
} NodeReader;

static PyObject *timeout_name;

static PyObject *reader_call(NodeReader *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *timeout = Py_None;
    if (nargs + nkw > 1 || (nkw && PyTuple_GET_ITEM(kwnames, 0) != timeout_name))
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    if (nargs + nkw == 1) timeout = args[0];
    PyObject *m = b1py_recv_node(self->peer, self->node, timeout);
    if (!m) return NULL;
    if (PyTuple_Check(m) && PyTuple_GET_SIZE(m) >= 5 && PyTuple_GET_ITEM(m, 0) == self->data) {
        PyObject *stamp = PyTuple_GET_ITEM(m, 4);
        if (PyTuple_Check(stamp) && PyTuple_GET_SIZE(stamp) == 3) {
            long long seq = PyLong_AsLongLong(PyTuple_GET_ITEM(stamp, 2));
            if (seq == -1 && PyErr_Occurred()) {
                PyErr_Clear();
            } else if (self->last >= 0 && seq == self->last + 1) {
                self->last = seq;
                return m;
            }
        }
    }
    PyObject *r = PyObject_CallOneArg(self->other, m);
    Py_DECREF(m);
    return r;
}

/* NodeReader(peer, node, data, other, slow) */
static PyObject *reader_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *peer, *node, *data, *other, *slow;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "NodeReader takes its arguments by position");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "NodeReader", 5, 5, &peer, &node, &data, &other, &slow)) return NULL;
    if (!PyCallable_Check(other) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "NodeReader: other and slow must be callables");
        return NULL;
    }
    NodeReader *self = (NodeReader *)tp->tp_alloc(tp, 0);
    if (!self) return NULL;
    PyObject **fields[] = {&self->peer, &self->node, &self->data, &self->other, &self->slow};
    PyObject *values[] = {peer, node, data, other, slow};
    for (int i = 0; i < 5; i++) {
        Py_INCREF(values[i]);
        *fields[i] = values[i];
    }
    self->last = -2;
    self->vectorcall = (vectorcallfunc)reader_call;
    return (PyObject *)self;
}

static int reader_traverse(NodeReader *self, visitproc visit, void *arg) {
    Py_VISIT(self->peer);
    Py_VISIT(self->node);
    Py_VISIT(self->data);
    Py_VISIT(self->other);
    Py_VISIT(self->slow);
    return 0;
}

static int reader_clear(NodeReader *self) {
    Py_CLEAR(self->peer);
    Py_CLEAR(self->node);
    Py_CLEAR(self->data);
    Py_CLEAR(self->other);
    Py_CLEAR(self->slow);
    return 0;
}

static void reader_dealloc(NodeReader *self) {
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef reader_members[] = {
    {"last", T_LONGLONG, offsetof(NodeReader, last), 0,
     "the sequence of the last message returned (-2: none yet); the owner's to set"},
    {NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bus1py._messages.NodeReader",
    .tp_doc = "NodeReader(peer, node, data, other, slow): the receive of one node's numbered "
              "stream in one C call (reader.c).",
    .tp_basicsize = sizeof(NodeReader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = reader_new,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(NodeReader, vectorcall),
    .tp_members = reader_members,
};

PyTypeObject *b1py_reader_type(void) {
    if (!(timeout_name = PyUnicode_InternFromString("timeout"))) return NULL;
    return PyType_Ready(&ReaderType) < 0 ? NULL : &ReaderType;
}
