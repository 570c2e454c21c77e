/*
 * peer.c -- bus1py._messages.PeerCore: the base class of bus1py.Peer, holding what names
 * a peer (its bus, slot and id) and the per-process state that peerbase.py keeps of it, and
 * giving it `send` and `recv` as methods in C.
 *
 * Why in C: a one-message send or receive costs the bus about 1,300 instructions, and a
 * Python method around it (its frame, the thread's frame lookup, the argument checks)
 * cost about as much again.  Here the common forms run without a Python frame:
 * `send(dests, payload)` with a bytes payload and destinations an int or a list or tuple
 * of ints, and `recv(timeout, copy)` with a timeout of None or a number >= 0 and a bool
 * copy, or with `node=h` (an int) and copy True, the receive for one node.  Anything
 * else -- other types, carried handles, flags, bad values, and every failure of the bus
 * call -- goes to the Python methods of bus1py.Peer (`_send_general`, `_send_failed`,
 * `_recv_general`, `_recv_failed`, `_recv_node_failed`), so each error is raised, and
 * EDQUOT's reap-and-retry and a receive's EINTR are handled, in one place.
 *
 * Invariants:
 *   - `frame` is the Frame (bus1py/frame.py) that Peer._frame() returned to the thread
 *     whose PyThreadState id is `tid`, and `f` its struct: the thread's own frame of the
 *     bus, for as long as the bus is open (Bus.close sets every frame's base to NULL, so a
 *     frame of a closed bus is never used: the Python method raises instead).  Any other
 *     thread, or a peer not attached in this process (a fork child), takes it again
 *     through Peer._frame(), which attaches.
 *   - A call that runs without the GIL holds its own reference to the frame, so another
 *     thread taking over the cache cannot free it under the call.
 *   - The fast forms return exactly what the Python methods return: the stamp (ts, id,
 *     seq), and the Message that messages.c builds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <structmember.h>
#include "messages.h"

/* Python sees every field as an object member (`_bus`, `_slot`, `_id`, `_ready`,
 * `_attached`): those are the attributes its interpreter reads fastest (as __slots__). */
typedef struct {
    PyObject_HEAD
    PyObject *bus;      /* Peer._bus */
    PyObject *slot_obj; /* Peer._slot, as `slot` */
    PyObject *id_obj;   /* Peer._id, as `id` */
    PyObject *ready;    /* Peer._ready: its ReadyPipe, or None */
    PyObject *attached; /* Peer._attached: True once this process is recorded as a holder */
    uint64_t id;
    uint32_t slot;
    uint32_t max_dests; /* the bus's, read with the frame */
    uint64_t tid;       /* the thread of `frame` (0: none) */
    PyObject *frame;    /* that thread's Frame */
    PyObject *held;     /* frame.held once it is set (zero-copy receives), else NULL */
    struct b1_frame *f;
} PeerCore;

static struct {
    PyObject *frame, *address, *max_dests, *held, *sync;
    PyObject *send_general, *send_failed, *recv_general, *recv_failed, *recv_node_failed;
    PyObject *timeout, *copy, *node, *node_kw;
} N; /* interned names */

static PyTypeObject PeerType;

/* this thread's frame, when the cache holds it and the peer is attached; else NULL */
static inline struct b1_frame *cached(PeerCore *self) {
    if (self->f && self->attached == Py_True && self->tid == PyThreadState_GetID(PyThreadState_Get()) &&
        self->f->base)
        return self->f;
    return NULL;
}

/* this thread's frame, taken through Peer._frame() (attaching; raising when the bus is
 * closed) unless cached; NULL with an exception set */
static struct b1_frame *frame_of(PeerCore *self) {
    struct b1_frame *f = cached(self);
    if (f) return f;
    PyObject *frame = PyObject_CallMethodNoArgs((PyObject *)self, N.frame);
    if (!frame) return NULL;
    PyObject *addr = PyObject_GetAttr(frame, N.address), *md = PyObject_GetAttr(frame, N.max_dests);
    unsigned long long a = addr ? PyLong_AsUnsignedLongLong(addr) : 0;
    unsigned long md_v = md ? PyLong_AsUnsignedLong(md) : 0;
    Py_XDECREF(addr);
    Py_XDECREF(md);
    if (PyErr_Occurred() || !a) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a frame without an address");
        Py_DECREF(frame);
        return NULL;
    }
    Py_XSETREF(self->frame, frame);
    Py_CLEAR(self->held);
    self->f = (struct b1_frame *)(uintptr_t)a;
    self->max_dests = md_v > UINT32_MAX ? UINT32_MAX : (uint32_t)md_v;
    self->tid = PyThreadState_GetID(PyThreadState_Get());
    return self->f;
}

/* self.<name>(*args, **kwargs) of the vectorcall that reached a fast method */
static PyObject *delegate(PeerCore *self, PyObject *name, PyObject *const *args, size_t nargsf,
                          PyObject *kwnames) {
    PyObject *meth = PyObject_GetAttr((PyObject *)self, name);
    if (!meth) return NULL;
    PyObject *r = PyObject_Vectorcall(meth, args, PyVectorcall_NARGS(nargsf), kwnames);
    Py_DECREF(meth);
    return r;
}

/* an exact int from 0 to 2**64-1 into *out: 1; anything else 0, no exception left */
static int handle_id(PyObject *o, uint64_t *out) {
    if (!PyLong_CheckExact(o)) return 0;
    *out = PyLong_AsUnsignedLongLong(o);
    if (*out == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

int b1py_handle_ids(PyObject *const *items, Py_ssize_t n, uint64_t *out) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (!handle_id(items[i], &out[i])) return 0;
    return 1;
}

int b1py_positional(const char *type_name, PyObject *args, PyObject *kw, Py_ssize_t n, PyObject **out) {
    const char *dot = strrchr(type_name, '.');
    const char *name = dot ? dot + 1 : type_name;
    if ((kw && PyDict_GET_SIZE(kw)) || !PyTuple_Check(args) || PyTuple_GET_SIZE(args) != n) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, by position", name, n);
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) out[i] = PyTuple_GET_ITEM(args, i);
    return 1;
}

PyDoc_STRVAR(send_doc,
"send($self, destinations, payload, handles=(), *, fds=(), unreachable_error=False)\n--\n\n"
"Send `payload` to every node in `destinations` (handle ids) in one transaction,\n"
"carrying `handles` (the sender's handle ids) to every receiver, and `fds` (at most\n"
"256 open file descriptors, EMSGSIZE past it, EBADF for a closed one): each\n"
"receiver gets its own copies in `msg.fds`, installed at its receive (fds.py).\n\n"
"Returns the message's stamp (timestamp, sender id, sequence).  Never blocks; raises\n"
"with nothing sent when a handle is unknown (ENXIO), the payload too large\n"
"(EMSGSIZE), the pool full (EXFULL) or a receiver's quota exhausted (EDQUOT).  A\n"
"message to a destroyed node is silently dropped, as bus1 does; with\n"
"unreachable_error=True the send fails with EHOSTUNREACH instead when the sender has\n"
"already received NODE_DESTROY for every destination.");

static PyObject *peer_send(PeerCore *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames) goto general;
    PyObject *dests = args[0], *payload = args[1];
    if (!PyBytes_CheckExact(payload) || PyBytes_GET_SIZE(payload) > UINT32_MAX) goto general;
    struct b1_frame *f = frame_of(self);
    if (!f) return NULL;
    uint64_t dest = 0;
    uint32_t n = 0; /* 0: the one destination is `dest` */
    if (PyLong_CheckExact(dests)) {
        if (!handle_id(dests, &dest)) goto general;
    } else if (PyList_CheckExact(dests) || PyTuple_CheckExact(dests)) {
        Py_ssize_t k = PySequence_Fast_GET_SIZE(dests);
        PyObject **items = PySequence_Fast_ITEMS(dests);
        if (k == 1) {
            if (!handle_id(items[0], &dest)) goto general;
        } else {
            if (k < 1 || k > self->max_dests || !b1py_handle_ids(items, k, f->dests)) goto general;
            n = (uint32_t)k;
        }
    } else {
        goto general;
    }
    /* the GIL stays held: a send never waits but for a peer lock, whose holder needs no
     * GIL to let go of it, and giving the GIL up and back costs as much as the checks */
    int64_t ts = b1py_send(f, self->slot, self->id, dest, n, PyBytes_AS_STRING(payload),
                           (uint32_t)PyBytes_GET_SIZE(payload), 0, 0);
    if (ts < 0) {
        PyObject *r = PyLong_FromLongLong(ts);
        if (!r) return NULL;
        PyObject *out = PyObject_CallMethodObjArgs((PyObject *)self, N.send_failed, r, dests, payload, NULL);
        Py_DECREF(r);
        return out;
    }
    return b1py_stamp(ts, self->id, f->seq);
general:
    return delegate(self, N.send_general, args, nargsf, kwnames);
}

/* recv's timeout as the C helper's nanoseconds (bus1py.args.timeout_ns): 1, or 0 for
 * anything but None and an exact int or float >= 0, which the Python method judges */
static int timeout_ns(PyObject *t, int64_t *ns) {
    double s;
    if (t == Py_None) {
        *ns = -1;
        return 1;
    }
    if (PyFloat_CheckExact(t)) {
        s = PyFloat_AS_DOUBLE(t);
    } else if (PyLong_CheckExact(t)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(t, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        s = (double)v;
    } else {
        return 0;
    }
    if (!(s >= 0)) return 0; /* negative or NaN */
    if (s == 0)
        *ns = 0;
    else if (s >= 9.2e9)
        *ns = -1;
    else
        *ns = (int64_t)(s * 1e9) > 1 ? (int64_t)(s * 1e9) : 1;
    return 1;
}

/* the receive for one node (recv's node=, b1py_recv_node): messages.c, its failures receiving.py's;
 * *seq as b1py_recv_node's, read from the frame before any Python code runs */
static PyObject *recv_node(PeerCore *self, struct b1_frame *f, uint64_t node_id, PyObject *node,
                           PyObject *timeout, int64_t ns, uint64_t *seq) {
    PyObject *frame = self->frame;
    Py_INCREF(frame); /* the wait runs without the GIL: see the invariants */
    PyObject *m = b1py_node_message(f, self->slot, self->id, node_id, 0, ns, (PyObject *)self);
    *seq = m && !PyLong_CheckExact(m) && f->info.type == B1_MSG_DATA ? f->info.seq : UINT64_MAX;
    if (m && PyLong_CheckExact(m)) {
        Py_SETREF(m, PyObject_CallMethodObjArgs((PyObject *)self, N.recv_node_failed, m, node, timeout, NULL));
    } else if (m && self->ready && self->ready != Py_None) {
        PyObject *ok = PyObject_CallMethodNoArgs(self->ready, N.sync);
        if (!ok) Py_CLEAR(m);
        Py_XDECREF(ok);
    }
    Py_DECREF(frame);
    return m;
}

PyObject *b1py_recv_node(PyObject *peer, PyObject *node, PyObject *timeout, uint64_t *seq) {
    PeerCore *self = (PeerCore *)peer;
    int64_t ns;
    uint64_t node_id;
    *seq = UINT64_MAX;
    if (!PyObject_TypeCheck(peer, &PeerType) || !timeout_ns(timeout, &ns) || !handle_id(node, &node_id) ||
        !node_id) {
        PyObject *a[] = {timeout, node};
        return delegate(self, N.recv_general, a, 1, N.node_kw);
    }
    struct b1_frame *f = frame_of(self);
    return f ? recv_node(self, f, node_id, node, timeout, ns, seq) : NULL;
}

struct b1_frame *b1py_peer_frame(PyObject *peer, uint32_t *slot, uint64_t *id, uint32_t *max_dests) {
    if (!PyObject_TypeCheck(peer, &PeerType)) {
        PyErr_SetString(PyExc_TypeError, "a bus1py Peer was expected");
        return NULL;
    }
    PeerCore *self = (PeerCore *)peer;
    struct b1_frame *f = frame_of(self);
    *slot = self->slot;
    *id = self->id;
    *max_dests = self->max_dests;
    return f;
}

PyDoc_STRVAR(recv_doc,
"recv($self, /, timeout=None, copy=True, *, node=None)\n--\n\n"
"The next message: waits for one (None), fails at once (0, BlockingIOError), or\n"
"waits at most `timeout` seconds (TimeoutError).  With node=h, the first message\n"
"addressed to this peer's handle h (data or a notice of its node): the messages\n"
"for other nodes stay queued, in their order (copied only).\n\n"
"With copy=False a data message's payload is a read-only memoryview into the pool\n"
"instead of bytes: no copy at any size, but the message's pool record and this\n"
"peer's quota stay charged until `msg.release()` or until the message is garbage\n"
"collected, and the view raises ValueError once released (receive.py).");

static PyObject *peer_recv(PeerCore *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *timeout = Py_None, *copy = Py_True, *node = Py_None;
    if (nargs > 2) goto general;
    if (nargs > 0) timeout = args[0];
    if (nargs > 1) copy = args[1];
    if (kwnames) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, i);
            if (k == N.timeout && nargs < 1 && timeout == Py_None)
                timeout = args[nargs + i];
            else if (k == N.copy && nargs < 2 && copy == Py_True)
                copy = args[nargs + i];
            else if (k == N.node && node == Py_None)
                node = args[nargs + i];
            else
                goto general; /* not interned, repeated or unknown: Python's rules */
        }
    }
    int64_t ns;
    if ((copy != Py_True && copy != Py_False) || !timeout_ns(timeout, &ns)) goto general;
    uint64_t node_id = 0;
    if (node != Py_None && (copy != Py_True || !handle_id(node, &node_id) || !node_id)) goto general;
    struct b1_frame *f = frame_of(self);
    if (!f) return NULL;
    if (node_id) {
        uint64_t seq;
        return recv_node(self, f, node_id, node, timeout, ns, &seq);
    }
    PyObject *held = NULL;
    if (copy == Py_False) {
        if (!self->held) {
            PyObject *h = PyObject_GetAttr(self->frame, N.held);
            if (!h) return NULL;
            if (h == Py_None) {
                Py_DECREF(h);
                goto general; /* the first zero-copy receive of the frame sets it up */
            }
            self->held = h;
        }
        if (f->infos_cap < 1) goto general;
        held = self->held;
    }
    PyObject *frame = self->frame, *m;
    Py_INCREF(frame);
    Py_XINCREF(held);
    /* a look without waiting first, with the GIL (as messages.c's timeout 0): giving the
     * GIL up and back costs a third of a receive, and is only worth it to wait */
    int r = held ? b1py_recv_many(f, self->slot, self->id, 1, 0, B1_RECV_NOCOPY)
                 : b1py_recv(f, self->slot, self->id, 0);
    if (r == -EAGAIN && ns != 0) {
        Py_BEGIN_ALLOW_THREADS
        r = held ? b1py_recv_many(f, self->slot, self->id, 1, ns, B1_RECV_NOCOPY)
                 : b1py_recv(f, self->slot, self->id, ns);
        Py_END_ALLOW_THREADS
    }
    if (held ? r < 0 : r != 0) {
        PyObject *e = PyLong_FromLong(r);
        m = e ? PyObject_CallMethodObjArgs((PyObject *)self, N.recv_failed, e, timeout, copy, NULL) : NULL;
        Py_XDECREF(e);
    } else {
        m = held ? b1py_taken(f, self->slot, self->id, held, (PyObject *)self) : b1py_copied(f, (PyObject *)self);
    }
    Py_DECREF(frame);
    Py_XDECREF(held);
    if (m && self->ready && self->ready != Py_None) {
        PyObject *ok = PyObject_CallMethodNoArgs(self->ready, N.sync);
        if (!ok) Py_CLEAR(m);
        Py_XDECREF(ok);
    }
    return m;
general:
    return delegate(self, N.recv_general, args, nargsf, kwnames);
}

static PyMethodDef peer_methods[] = {
    {"send", (PyCFunction)(void (*)(void))peer_send, METH_FASTCALL | METH_KEYWORDS, send_doc},
    {"recv", (PyCFunction)(void (*)(void))peer_recv, METH_FASTCALL | METH_KEYWORDS, recv_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef peer_members[] = {
    {"_bus", T_OBJECT_EX, offsetof(PeerCore, bus), READONLY, NULL},
    {"_slot", T_OBJECT_EX, offsetof(PeerCore, slot_obj), READONLY, NULL},
    {"_id", T_OBJECT_EX, offsetof(PeerCore, id_obj), READONLY, NULL},
    {"_ready", T_OBJECT_EX, offsetof(PeerCore, ready), 0, NULL},
    {"_attached", T_OBJECT_EX, offsetof(PeerCore, attached), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* PeerCore(bus, slot, id): not attached, no readiness pipe */
static int peer_init(PeerCore *self, PyObject *args, PyObject *kwds) {
    PyObject *a[3];
    if (!b1py_positional("PeerCore", args, kwds, 3, a)) return -1;
    PyObject *bus = a[0], *slot = a[1], *id = a[2];
    if (!PyLong_Check(slot) || !PyLong_Check(id)) {
        PyErr_SetString(PyExc_TypeError, "a peer's slot and id are ints");
        return -1;
    }
    unsigned long sv = PyLong_AsUnsignedLong(slot);
    unsigned long long iv = PyLong_AsUnsignedLongLong(id);
    if (PyErr_Occurred()) return -1;
    if (sv > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a peer's slot fits in 32 bits");
        return -1;
    }
    self->slot = (uint32_t)sv;
    self->id = iv;
    Py_INCREF(bus);
    Py_INCREF(slot);
    Py_INCREF(id);
    Py_INCREF(Py_None);
    Py_INCREF(Py_False);
    Py_XSETREF(self->bus, bus);
    Py_XSETREF(self->slot_obj, slot);
    Py_XSETREF(self->id_obj, id);
    Py_XSETREF(self->ready, Py_None);
    Py_XSETREF(self->attached, Py_False);
    return 0;
}

static int peer_traverse(PeerCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->bus);
    Py_VISIT(self->slot_obj);
    Py_VISIT(self->id_obj);
    Py_VISIT(self->attached);
    Py_VISIT(self->ready);
    Py_VISIT(self->frame);
    Py_VISIT(self->held);
    return 0;
}

static int peer_clear(PeerCore *self) {
    Py_CLEAR(self->bus);
    Py_CLEAR(self->slot_obj);
    Py_CLEAR(self->id_obj);
    Py_CLEAR(self->attached);
    Py_CLEAR(self->ready);
    Py_CLEAR(self->held);
    self->f = NULL;
    self->tid = 0;
    Py_CLEAR(self->frame);
    return 0;
}

static void peer_dealloc(PeerCore *self) {
    PyObject_GC_UnTrack(self);
    peer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject PeerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bus1py._messages.PeerCore",
    .tp_doc = "What names a peer and its hot calls in C (bus1py.Peer's base).",
    .tp_basicsize = sizeof(PeerCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)peer_init,
    .tp_dealloc = (destructor)peer_dealloc,
    .tp_traverse = (traverseproc)peer_traverse,
    .tp_clear = (inquiry)peer_clear,
    .tp_methods = peer_methods,
    .tp_members = peer_members,
};

PyTypeObject *b1py_peer_type(void) {
    struct { PyObject **slot; const char *name; } names[] = {
        {&N.frame, "_frame"}, {&N.address, "address"}, {&N.max_dests, "max_dests"},
        {&N.held, "held"}, {&N.sync, "sync"}, {&N.send_general, "_send_general"},
        {&N.send_failed, "_send_failed"}, {&N.recv_general, "_recv_general"},
        {&N.recv_failed, "_recv_failed"}, {&N.timeout, "timeout"}, {&N.copy, "copy"},
        {&N.node, "node"}, {&N.recv_node_failed, "_recv_node_failed"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].name))) return NULL;
    if (!(N.node_kw = PyTuple_Pack(1, N.node))) return NULL;
    return PyType_Ready(&PeerType) < 0 ? NULL : &PeerType;
}
