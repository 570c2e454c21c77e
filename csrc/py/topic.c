/*
 * topic.c -- a topic's two hot calls as single C calls (bus1py/topic.py): the topic's
 * send, bus1py._messages.PartialSender, and a subscription's receive,
 * bus1py._messages.NodeReader.  Each is an object the owner makes once and calls per
 * message; what does not fit its fast form goes, unchanged, to the owner's Python method.
 *
 * Why in C: the bus call under each is a call into C already (a partial multicast, the
 * receive for one node); the Python method around it cost as much again (its frame, the
 * thread's frame lookup, the arguments).
 *
 * Invariants:
 *   - PartialSender(peer, dests, flags, slow): `sender(payload)` with a bytes payload and
 *     `dests` (a list the owner changes in place, never rebinds) holding 1 to the frame's
 *     room of exact ints is one b1_frame_send_partial from the peer with `flags`; it
 *     returns how many destinations took the message.  When the bus refuses the send as a
 *     whole, nothing was sent, and the call goes to `slow(payload)` -- as does any other
 *     form of call -- which takes in, retries or raises.  So a message is sent once.
 *   - NodeReader(peer, node, data, other, slow): `reader(timeout=None)` returns the message
 *     the peer's `recv(timeout, node=node)` returns when it is a `data` message whose
 *     sequence (msg.stamp[2]) is `last` + 1, and sets `last` to it.  Every other message --
 *     a notice, the first one, one after a gap -- goes to `other(msg)`, whose return value
 *     is the call's: the owner keeps `last` there and counts the gaps, in one place.  Other
 *     arguments than one timeout go to `slow(*args, **kw)`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include "messages.h"

#define STACK_DESTS 256 /* a send to more takes the owner's method (its frame's error room) */

typedef struct {
    PyObject_HEAD
    PyObject *peer, *dests, *slow;
    uint32_t flags;
    vectorcallfunc vectorcall;
} PartialSender;

static PyObject *sender_call(PartialSender *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), n = PyList_GET_SIZE(self->dests);
    if (nargs != 1 || kwnames || !PyBytes_CheckExact(args[0]) || PyBytes_GET_SIZE(args[0]) > UINT32_MAX ||
        n < 1 || n > STACK_DESTS || !b1py_send_partial)
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    uint32_t slot, room;
    uint64_t id;
    struct b1_frame *f = b1py_peer_frame(self->peer, &slot, &id, &room);
    if (!f) return NULL;
    if ((uint32_t)n > room) return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyList_GET_ITEM(self->dests, i);
        uint64_t v = PyLong_CheckExact(d) ? PyLong_AsUnsignedLongLong(d) : (uint64_t)-1;
        if (v == (uint64_t)-1) {
            PyErr_Clear();
            return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
        }
        f->dests[i] = v;
    }
    int32_t errors[STACK_DESTS];
    memset(errors, 0, (size_t)n * sizeof *errors);
    /* the GIL stays held, as for the Peer's send (peer.c): a send waits for no one */
    int64_t r = b1py_send_partial(f, slot, id, (uint32_t)n, PyBytes_AS_STRING(args[0]),
                                  (uint32_t)PyBytes_GET_SIZE(args[0]), 0, self->flags, errors);
    if (r < 0) return PyObject_Vectorcall(self->slow, args, nargsf, kwnames); /* nothing sent */
    Py_ssize_t took = n;
    if (r & 1) { /* some could not take it; none did when no timestamp came back */
        took = 0;
        if (r > 1)
            for (Py_ssize_t i = 0; i < n; i++) took += !errors[i];
    }
    return PyLong_FromSsize_t(took);
}

/* PartialSender(peer, dests, flags, slow) */
static PyObject *sender_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *peer, *dests, *flags, *slow;
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "PartialSender takes its arguments by position");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "PartialSender", 4, 4, &peer, &dests, &flags, &slow)) return NULL;
    unsigned long fl = PyLong_Check(flags) ? PyLong_AsUnsignedLong(flags) : (unsigned long)-1;
    if (!PyList_CheckExact(dests) || !PyCallable_Check(slow) || fl > UINT32_MAX) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "PartialSender: dests must be a list, flags a 32-bit int, slow a callable");
        return NULL;
    }
    PartialSender *self = (PartialSender *)tp->tp_alloc(tp, 0);
    if (!self) return NULL;
    Py_INCREF(peer);
    Py_INCREF(dests);
    Py_INCREF(slow);
    self->peer = peer;
    self->dests = dests;
    self->slow = slow;
    self->flags = (uint32_t)fl;
    self->vectorcall = (vectorcallfunc)sender_call;
    return (PyObject *)self;
}

static int sender_traverse(PartialSender *self, visitproc visit, void *arg) {
    Py_VISIT(self->peer);
    Py_VISIT(self->dests);
    Py_VISIT(self->slow);
    return 0;
}

static int sender_clear(PartialSender *self) {
    Py_CLEAR(self->peer);
    Py_CLEAR(self->dests);
    Py_CLEAR(self->slow);
    return 0;
}

static void sender_dealloc(PartialSender *self) {
    PyObject_GC_UnTrack(self);
    sender_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bus1py._messages.PartialSender",
    .tp_doc = "PartialSender(peer, dests, flags, slow): a topic's send in one C call (topic.c).",
    .tp_basicsize = sizeof(PartialSender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = sender_new,
    .tp_dealloc = (destructor)sender_dealloc,
    .tp_traverse = (traverseproc)sender_traverse,
    .tp_clear = (inquiry)sender_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(PartialSender, vectorcall),
};

PyTypeObject *b1py_sender_type(void) {
    return PyType_Ready(&SenderType) < 0 ? NULL : &SenderType;
}

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
              "stream in one C call (topic.c).",
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
