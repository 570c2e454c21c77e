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
 *   - NodeReader(peer, node, other, slow): `reader(timeout=None)` returns the message the
 *     peer's `recv(timeout, node=node)` returns when it is a DATA message whose sequence
 *     (msg.stamp[2], as the receive left it in the frame) is `last` + 1, and sets `last`
 *     to it.  Every other message --
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
#define MAX_REFS 4

/* Both types: the objects given at construction, by position, held in refs[] (NULL past
 * the type's count), so one traverse, clear and dealloc serve both. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *refs[MAX_REFS];
    uint32_t flags; /* PartialSender's */
    long long last; /* NodeReader's: the sequence of the last message returned; -2: none yet */
} TopicCall;

enum { S_PEER, S_DESTS, S_FLAGS, S_SLOW };                /* PartialSender's arguments */
enum { R_PEER, R_NODE, R_OTHER, R_SLOW };                  /* NodeReader's */

/* tp(*args) with exactly n positional arguments, each held; NULL with TypeError else */
static TopicCall *topic_call_new(PyTypeObject *tp, PyObject *args, PyObject *kw, Py_ssize_t n,
                                 vectorcallfunc call) {
    PyObject *a[MAX_REFS];
    if (!b1py_positional(tp->tp_name, args, kw, n, a)) return NULL;
    TopicCall *self = (TopicCall *)tp->tp_alloc(tp, 0);
    if (!self) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) self->refs[i] = Py_NewRef(a[i]);
    self->vectorcall = call;
    return self;
}

static int topic_call_traverse(TopicCall *self, visitproc visit, void *arg) {
    for (int i = 0; i < MAX_REFS; i++) Py_VISIT(self->refs[i]);
    return 0;
}

static int topic_call_clear(TopicCall *self) {
    for (int i = 0; i < MAX_REFS; i++) Py_CLEAR(self->refs[i]);
    return 0;
}

static void topic_call_dealloc(TopicCall *self) {
    PyObject_GC_UnTrack(self);
    topic_call_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define TOPIC_CALL_TYPE(cname, pyname, doc, new, members)                                 \
    static PyTypeObject cname = {                                                          \
        PyVarObject_HEAD_INIT(NULL, 0)                                                     \
        .tp_name = pyname,                                                                 \
        .tp_doc = doc,                                                                     \
        .tp_basicsize = sizeof(TopicCall),                                                 \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,  \
        .tp_new = new,                                                                     \
        .tp_dealloc = (destructor)topic_call_dealloc,                                      \
        .tp_traverse = (traverseproc)topic_call_traverse,                                  \
        .tp_clear = (inquiry)topic_call_clear,                                             \
        .tp_call = PyVectorcall_Call,                                                      \
        .tp_vectorcall_offset = offsetof(TopicCall, vectorcall),                           \
        .tp_members = members,                                                             \
    }

static PyObject *sender_call(TopicCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *dests = self->refs[S_DESTS], *slow = self->refs[S_SLOW];
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), n = PyList_GET_SIZE(dests);
    if (nargs != 1 || kwnames || !PyBytes_CheckExact(args[0]) || PyBytes_GET_SIZE(args[0]) > UINT32_MAX ||
        n < 1 || n > STACK_DESTS || !b1py_send_partial)
        return PyObject_Vectorcall(slow, args, nargsf, kwnames);
    uint32_t slot, room;
    uint64_t id;
    struct b1_frame *f = b1py_peer_frame(self->refs[S_PEER], &slot, &id, &room);
    if (!f) return NULL;
    if ((uint32_t)n > room || !b1py_handle_ids(PySequence_Fast_ITEMS(dests), n, f->dests))
        return PyObject_Vectorcall(slow, args, nargsf, kwnames);
    int32_t errors[STACK_DESTS];
    memset(errors, 0, (size_t)n * sizeof *errors);
    /* the GIL stays held, as for the Peer's send (peer.c): a send waits for no one */
    int64_t r = b1py_send_partial(f, slot, id, (uint32_t)n, PyBytes_AS_STRING(args[0]),
                                  (uint32_t)PyBytes_GET_SIZE(args[0]), 0, self->flags, errors);
    if (r < 0) return PyObject_Vectorcall(slow, args, nargsf, kwnames); /* nothing sent */
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
    TopicCall *self = topic_call_new(tp, args, kw, 4, (vectorcallfunc)sender_call);
    if (!self) return NULL;
    PyObject *flags = self->refs[S_FLAGS];
    unsigned long fl = PyLong_Check(flags) ? PyLong_AsUnsignedLong(flags) : (unsigned long)-1;
    if (!PyList_CheckExact(self->refs[S_DESTS]) || !PyCallable_Check(self->refs[S_SLOW]) || fl > UINT32_MAX) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "PartialSender: dests must be a list, flags a 32-bit int, slow a callable");
        Py_DECREF(self);
        return NULL;
    }
    self->flags = (uint32_t)fl;
    return (PyObject *)self;
}

TOPIC_CALL_TYPE(SenderType, "bus1py._messages.PartialSender",
                "PartialSender(peer, dests, flags, slow): a topic's send in one C call (topic.c).", sender_new,
                NULL);

PyTypeObject *b1py_sender_type(void) {
    return PyType_Ready(&SenderType) < 0 ? NULL : &SenderType;
}

static PyObject *timeout_name;

static PyObject *reader_call(TopicCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *timeout = Py_None;
    if (nargs + nkw > 1 || (nkw && PyTuple_GET_ITEM(kwnames, 0) != timeout_name))
        return PyObject_Vectorcall(self->refs[R_SLOW], args, nargsf, kwnames);
    if (nargs + nkw == 1) timeout = args[0];
    uint64_t seq;
    PyObject *m = b1py_recv_node(self->refs[R_PEER], self->refs[R_NODE], timeout, &seq);
    if (!m) return NULL;
    if (self->last >= 0 && seq == (uint64_t)self->last + 1) { /* a DATA message, the next one */
        self->last = (long long)seq;
        return m;
    }
    PyObject *r = PyObject_CallOneArg(self->refs[R_OTHER], m);
    Py_DECREF(m);
    return r;
}

/* NodeReader(peer, node, other, slow) */
static PyObject *reader_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    TopicCall *self = topic_call_new(tp, args, kw, 4, (vectorcallfunc)reader_call);
    if (!self) return NULL;
    if (!PyCallable_Check(self->refs[R_OTHER]) || !PyCallable_Check(self->refs[R_SLOW])) {
        PyErr_SetString(PyExc_TypeError, "NodeReader: other and slow must be callables");
        Py_DECREF(self);
        return NULL;
    }
    self->last = -2;
    return (PyObject *)self;
}

static PyMemberDef reader_members[] = {
    {"last", T_LONGLONG, offsetof(TopicCall, last), 0,
     "the sequence of the last message returned (-2: none yet); the owner's to set"},
    {NULL},
};

TOPIC_CALL_TYPE(ReaderType, "bus1py._messages.NodeReader",
                "NodeReader(peer, node, other, slow): the receive of one node's numbered stream in "
                "one C call (topic.c).", reader_new, reader_members);

PyTypeObject *b1py_reader_type(void) {
    if (!(timeout_name = PyUnicode_InternFromString("timeout"))) return NULL;
    return PyType_Ready(&ReaderType) < 0 ? NULL : &ReaderType;
}
