/*
 * messages.c -- bus1py._messages: the hot receive and send calls, with the Python objects
 * they return built here, in C, through the CPython API.
 *
 * Why a CPython extension next to the cffi module: a cffi function cannot return a Python
 * object, so a received batch had to be turned into Message tuples by Python code, which
 * cost 480-900 ns per message (an unpack into ten ints, a bytes slice, two tuples, the
 * tuple subclass) while the C dequeue costs about 100.  Here one call takes the batch and
 * builds every Message with the C API (tens of ns each); for a single message the call
 * also replaces cffi's conversion of every argument.  The bus itself stays in bus1py._b1:
 * this module calls it through the addresses cffi gives for its functions
 * (ffi.addressof(lib, name)), which are cffi's direct-call wrappers, so every call runs
 * under B1_GUARD (guard.h) exactly as a call from Python through cffi does.
 *
 * Invariants:
 *   - A Message built here equals, field for field and type for type, what the Python
 *     code of receive.py and peer.py builds: (MessageType, destination, payload, handles,
 *     (ts, sender, seq)) as an instance of the Message (or SliceMessage) class that
 *     `setup` was given; a zero-copy payload is a read-only view of its record's bytes in
 *     the mapping, which it keeps mapped (slice.c).
 *   - The GIL is released around every call into the bus (as cffi does): a receive may
 *     wait, and other threads run meanwhile.  Nothing Python-visible is touched while it
 *     is released.
 *   - A call that failed in the bus returns its -errno as an int and builds nothing: the
 *     Python caller keeps its error handling (EINTR, timeouts, reaping) in one place.
 *   - State set by `setup` is process-wide and set once before the first call (bus1py
 *     imports this module from one place); it holds strong references to what it names.
 *   - A receive that cannot wait (timeout 0) keeps the GIL, as a send does: it waits for
 *     nothing but a peer lock, whose holder needs no GIL to let go of it.
 *   - Message is a tuple and nothing more (no __dict__, weak references or finalizer:
 *     `setup` refuses a class that is more), so it is freed by message_dealloc here, and a
 *     plain Message built here is left untracked by the cycle collector (its items are a
 *     MessageType, ints, bytes and tuples of ints, which hold no cycle).
 *
 * The Peer's own send and recv, which call into this file, are peer.c's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <unistd.h>
#include "messages.h"
#include "slice.h"

typedef int (*send_iov_fn)(struct b1_frame *, uint32_t, uint64_t, uint64_t, uint32_t,
                           const char *const *, const uint32_t *, uint32_t, uint32_t, uint32_t);

static struct {
    PyTypeObject *message;   /* message.Message */
    PyTypeObject *slice;     /* receive.SliceMessage */
    PyTypeObject *request;   /* message.Request (setup_calls), NULL before */
    PyObject *reply_attr;    /* "_reply" */
    b1py_recv_node_fn recv_node;
    int (*handle_release)(void *, uint32_t, uint64_t, uint64_t);
    PyObject *types;         /* message.MESSAGE_TYPES, indexed by B1_MSG_* */
    PyObject *empty;         /* () */
    PyObject *slice_attr;    /* "_slice" */
    b1py_slice_release_fn slice_release;
    send_iov_fn send_iov;
} S;

b1py_recv_many_fn b1py_recv_many;
b1py_recv_fn b1py_recv;
b1py_send_fn b1py_send;
b1py_send_partial_fn b1py_send_partial;

/* The ints of a batch's senders and destinations, which repeat from message to message:
 * the last one's object is handed out again (ints are immutable). */
struct ints {
    uint64_t sender, dest;
    PyObject *sender_obj, *dest_obj;
    PyObject *peer; /* borrowed: the receiving Peer, which a request's reply sends from */
};

static PyObject *int_of(uint64_t v, uint64_t *last, PyObject **obj) {
    if (!*obj || *last != v) {
        Py_XDECREF(*obj);
        *obj = PyLong_FromUnsignedLongLong(v);
        *last = v;
        if (!*obj) return NULL;
    }
    Py_INCREF(*obj);
    return *obj;
}

static void ints_clear(struct ints *c) {
    Py_CLEAR(c->sender_obj);
    Py_CLEAR(c->dest_obj);
}

/* The descriptors a message brought, fds[at..at+n) of the frame, as a tuple of ints (()
 * when none): the receiver's from here on (bus1py/fds.py). */
static PyObject *fds_of(const int32_t *fds, const struct b1_msg_info *in) {
    if (!in->n_fds) {
        Py_INCREF(S.empty);
        return S.empty;
    }
    PyObject *t = PyTuple_New((Py_ssize_t)in->n_fds);
    for (uint64_t i = 0; t && i < in->n_fds; i++) {
        PyObject *x = PyLong_FromLong(fds[in->fds_at + i]);
        if (!x) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, (Py_ssize_t)i, x);
    }
    return t;
}

/* A request's reply capability, its last carried handle, taken out of `*handles` into the
 * message's `_reply`, (peer, handle id, tag): what Message.reply sends with. */
static PyObject *reply_of(PyObject **handles, const struct b1_msg_info *in, PyObject *peer) {
    Py_ssize_t n = PyTuple_GET_SIZE(*handles);
    PyObject *rest = PyTuple_GetSlice(*handles, 0, n - 1), *tag = PyLong_FromUnsignedLongLong(in->tag);
    PyObject *reply = rest && tag ? PyTuple_Pack(3, peer ? peer : Py_None, PyTuple_GET_ITEM(*handles, n - 1), tag) : NULL;
    Py_XDECREF(tag);
    if (!reply) {
        Py_XDECREF(rest);
        return NULL;
    }
    Py_SETREF(*handles, rest);
    return reply;
}

/* One Message of type `tp` from an info record; steals `payload` and `handles`.  A request
 * is a Request (or, not copied, a SliceMessage) with `_reply` set. */
static PyObject *new_message(PyTypeObject *tp, const struct b1_msg_info *in, PyObject *payload,
                             PyObject *handles, const int32_t *fds, struct ints *c) {
    PyObject *m = NULL, *stamp = NULL, *carried_fds = fds_of(fds, in), *reply = NULL;
    if (!payload || !handles || !carried_fds) goto fail;
    if ((in->flags & B1_SEND_REQUEST) && in->n_handles && S.request) {
        if (!(reply = reply_of(&handles, in, c->peer))) goto fail;
        if (tp == S.message) tp = S.request;
    }
    if (in->type >= (uint64_t)PyTuple_GET_SIZE(S.types)) {
        PyErr_Format(PyExc_ValueError, "unknown message type %llu", (unsigned long long)in->type);
        goto fail;
    }
    stamp = PyTuple_New(3);
    if (!stamp) goto fail;
    PyObject *ts = PyLong_FromUnsignedLongLong(in->ts),
             *sender = int_of(in->sender, &c->sender, &c->sender_obj),
             *seq = PyLong_FromUnsignedLongLong(in->seq);
    PyTuple_SET_ITEM(stamp, 0, ts);
    PyTuple_SET_ITEM(stamp, 1, sender);
    PyTuple_SET_ITEM(stamp, 2, seq);
    if (!ts || !sender || !seq) goto fail;
    PyObject *dest = int_of(in->destination, &c->dest, &c->dest_obj);
    if (!dest) goto fail;
    /* what tuple.__new__(tp, items) does for a subclass: tp_alloc, then the items.  A plain
     * Message is allocated bare (every item is set just below) and left untracked (see the
     * invariants); a SliceMessage has a __dict__ and takes tp_alloc's zeroed, tracked object. */
    m = tp == S.message ? (PyObject *)PyObject_GC_NewVar(PyTupleObject, tp, 6) : tp->tp_alloc(tp, 6);
    if (!m) {
        Py_DECREF(dest);
        goto fail;
    }
    PyTuple_SET_ITEM(m, 5, carried_fds);
    PyObject *kind = PyTuple_GET_ITEM(S.types, (Py_ssize_t)in->type);
    Py_INCREF(kind);
    PyTuple_SET_ITEM(m, 0, kind);
    PyTuple_SET_ITEM(m, 1, dest);
    PyTuple_SET_ITEM(m, 2, payload);
    PyTuple_SET_ITEM(m, 3, handles);
    PyTuple_SET_ITEM(m, 4, stamp);
    if (reply) {
        int bad = PyObject_SetAttr(m, S.reply_attr, reply) < 0;
        Py_DECREF(reply);
        if (bad) Py_CLEAR(m);
    }
    return m;
fail:
    Py_XDECREF(reply);
    Py_XDECREF(payload);
    Py_XDECREF(handles);
    Py_XDECREF(stamp);
    Py_XDECREF(carried_fds);
    return NULL;
}

/* The carried handle ids as a tuple of ints (() when none). */
static PyObject *handles_of(const uint64_t *h, uint64_t n) {
    if (!n) {
        Py_INCREF(S.empty);
        return S.empty;
    }
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    if (!t) return NULL;
    for (uint64_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(h[i]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, x);
    }
    return t;
}

static int as_u64(PyObject *o, uint64_t *out) {
    *out = PyLong_AsUnsignedLongLong(o);
    return !(*out == (uint64_t)-1 && PyErr_Occurred());
}

static int as_i64(PyObject *o, int64_t *out) {
    *out = PyLong_AsLongLong(o);
    return !(*out == -1 && PyErr_Occurred());
}

static int as_u32(PyObject *o, uint32_t *out) {
    uint64_t v;
    if (!as_u64(o, &v)) return 0;
    if (v > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "value does not fit in 32 bits");
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

#define NEED_ARGS(k)                                                        \
    if (nargs != (k)) {                                                     \
        PyErr_Format(PyExc_TypeError, "expected %d arguments, got %zd", (k), nargs); \
        return NULL;                                                        \
    }                                                                       \
    if (!b1py_recv) {                                                          \
        PyErr_SetString(PyExc_RuntimeError, "bus1py._messages.setup was not called"); \
        return NULL;                                                        \
    }

/* Message's deallocator (setup installs it): a Message is a tuple and nothing more (setup
 * checked: no __dict__, no weak references, no finalizer), so freeing one is dropping its
 * items, as tuple's own deallocator does, without subtype_dealloc's general walk.  A
 * subclass's instances (SliceMessage) come here through subtype_dealloc, which has
 * cleared what the subclass added; the type reference is dropped here, as a heap type's
 * deallocator must. */
static void message_dealloc(PyObject *op) {
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    Py_TRASHCAN_BEGIN(op, message_dealloc)
    for (Py_ssize_t i = Py_SIZE(op); --i >= 0;) Py_XDECREF(PyTuple_GET_ITEM(op, i));
    tp->tp_free(op);
    Py_DECREF(tp);
    Py_TRASHCAN_END
}

/* Can `tp` (a tuple subclass) take message_dealloc: nothing but a tuple's items to free? */
static int bare_tuple_type(PyTypeObject *tp) {
    return (tp->tp_flags & Py_TPFLAGS_HEAPTYPE) && tp->tp_base == &PyTuple_Type &&
           tp->tp_basicsize == PyTuple_Type.tp_basicsize && tp->tp_itemsize == PyTuple_Type.tp_itemsize &&
           !tp->tp_dictoffset && !tp->tp_weaklistoffset && !tp->tp_finalize && !tp->tp_del;
}

/* setup(Message, SliceMessage, MESSAGE_TYPES, recv_many, recv, send, slice_release,
 * send_iov): the classes to build and the addresses of b1_frame_recv_many, b1_frame_recv,
 * b1_frame_send, b1_slice_release and b1_frame_send_iov. */
static PyObject *py_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "setup takes 8 arguments");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyTuple_Check(args[2]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) ||
        !PyType_IsSubtype((PyTypeObject *)args[1], (PyTypeObject *)args[0])) {
        PyErr_SetString(PyExc_TypeError, "setup needs a tuple subclass, a subclass of it and a tuple");
        return NULL;
    }
    uint64_t a[5];
    for (int i = 0; i < 5; i++)
        if (!as_u64(args[3 + i], &a[i])) return NULL;
    if (!a[0] || !a[1] || !a[2] || !a[3] || !a[4]) {
        PyErr_SetString(PyExc_ValueError, "a null function address");
        return NULL;
    }
    if (!bare_tuple_type((PyTypeObject *)args[0])) {
        PyErr_SetString(PyExc_TypeError, "setup needs a Message class that is a tuple and nothing more");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_INCREF(args[1]);
    Py_INCREF(args[2]);
    ((PyTypeObject *)args[0])->tp_dealloc = message_dealloc;
    Py_XSETREF(S.message, (PyTypeObject *)args[0]);
    Py_XSETREF(S.slice, (PyTypeObject *)args[1]);
    Py_XSETREF(S.types, args[2]);
    b1py_recv_many = (b1py_recv_many_fn)(uintptr_t)a[0];
    b1py_recv = (b1py_recv_fn)(uintptr_t)a[1];
    b1py_send = (b1py_send_fn)(uintptr_t)a[2];
    S.slice_release = (b1py_slice_release_fn)(uintptr_t)a[3];
    S.send_iov = (send_iov_fn)(uintptr_t)a[4];
    b1py_slice_setup(S.slice_release);
    Py_RETURN_NONE;
}

PyObject *b1py_copied(const struct b1_frame *f, PyObject *peer) {
    const struct b1_msg_info *in = &f->info;
    struct ints c = {.peer = peer};
    PyObject *m = new_message(S.message, in, PyBytes_FromStringAndSize(f->buf, (Py_ssize_t)in->len),
                              handles_of(f->handles, in->n_handles), f->fds, &c);
    ints_clear(&c);
    return m;
}

PyObject *b1py_stamp(int64_t ts, uint64_t id, uint64_t seq) {
    PyObject *stamp = PyTuple_New(3);
    if (!stamp) return NULL;
    PyObject *a = PyLong_FromLongLong(ts), *b = PyLong_FromUnsignedLongLong(id),
             *c = PyLong_FromUnsignedLongLong(seq);
    PyTuple_SET_ITEM(stamp, 0, a);
    PyTuple_SET_ITEM(stamp, 1, b);
    PyTuple_SET_ITEM(stamp, 2, c);
    if (!a || !b || !c) Py_CLEAR(stamp);
    return stamp;
}

/* recv(frame, slot, id, timeout_ns, peer) -> Message, or -errno: b1_frame_recv and the
 * Message of f->info, its payload copied from f->buf (`peer`: the receiver, for a reply). */
static PyObject *py_recv(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NEED_ARGS(5);
    uint64_t addr, id;
    uint32_t slot;
    int64_t ns;
    if (!as_u64(args[0], &addr) || !as_u32(args[1], &slot) || !as_u64(args[2], &id) ||
        !as_i64(args[3], &ns))
        return NULL;
    struct b1_frame *f = (struct b1_frame *)(uintptr_t)addr;
    int r;
    if (ns == 0) {
        r = b1py_recv(f, slot, id, 0);
    } else {
        Py_BEGIN_ALLOW_THREADS
        r = b1py_recv(f, slot, id, ns);
        Py_END_ALLOW_THREADS
    }
    if (r) return PyLong_FromLong(r);
    return b1py_copied(f, args[4]);
}

/* recv_node(frame, slot, id, node, watch, timeout_ns, tag, peer) -> Message, or -errno, or
 * 1: b1_frame_recv_node, and the Message of what it took when it carries `tag` (2**64-1:
 * any); a message
 * with another tag (the late reply of a call given up) is dropped, its descriptors closed,
 * and 1 says to look again. */
static PyObject *py_recv_node(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NEED_ARGS(8);
    uint64_t addr, id, node, watch, tag;
    uint32_t slot;
    int64_t ns;
    if (!as_u64(args[0], &addr) || !as_u32(args[1], &slot) || !as_u64(args[2], &id) ||
        !as_u64(args[3], &node) || !as_u64(args[4], &watch) || !as_i64(args[5], &ns) || !as_u64(args[6], &tag))
        return NULL;
    struct b1_frame *f = (struct b1_frame *)(uintptr_t)addr;
    PyObject *m = b1py_node_message(f, slot, id, node, watch, ns, args[7]);
    if (!m || PyLong_CheckExact(m)) return m;
    if (tag != UINT64_MAX && f->info.tag != tag && f->info.type == B1_MSG_DATA) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(PyTuple_GET_ITEM(m, 5)); i++)
            close((int)PyLong_AsLong(PyTuple_GET_ITEM(PyTuple_GET_ITEM(m, 5), i)));
        Py_DECREF(m);
        return PyLong_FromLong(1);
    }
    return m;
}

PyObject *b1py_node_message(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t node, uint64_t watch,
                            int64_t ns, PyObject *peer) {
    if (!S.recv_node) {
        PyErr_SetString(PyExc_RuntimeError, "bus1py._messages.setup_calls was not called");
        return NULL;
    }
    /* a look without waiting first, with the GIL (as peer.c's recv): giving the GIL up and
     * back is worth it only to wait */
    int r = S.recv_node(f, slot, id, node, watch, 0);
    if (r == -EAGAIN && ns != 0) {
        Py_BEGIN_ALLOW_THREADS
        r = S.recv_node(f, slot, id, node, watch, ns);
        Py_END_ALLOW_THREADS
    }
    if (r) return PyLong_FromLong(r);
    return b1py_copied(f, peer);
}

/* tagged_send(frame, slot, id, dest, payload, n_handles, flags, tag, release) -> ts, or
 * -errno: b1_frame_send of the bytes `payload` to the one handle `dest`, carrying the
 * frame's first n_handles handles and `tag` (a call's request, or its reply); with release
 * set, a send that ran releases the sender's handle `dest` after it (a reply: the
 * capability is used once; a release that fails leaves the handle, nothing else). */
static PyObject *py_tagged_send(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NEED_ARGS(9);
    uint64_t addr, id, dest;
    uint32_t slot, nh, flags, tag, release;
    if (!as_u64(args[0], &addr) || !as_u32(args[1], &slot) || !as_u64(args[2], &id) ||
        !as_u64(args[3], &dest) || !as_u32(args[5], &nh) || !as_u32(args[6], &flags) ||
        !as_u32(args[7], &tag) || !as_u32(args[8], &release))
        return NULL;
    if (!PyBytes_CheckExact(args[4]) || PyBytes_GET_SIZE(args[4]) > UINT32_MAX) {
        PyErr_SetString(PyExc_TypeError, "tagged_send takes its payload as bytes");
        return NULL;
    }
    if (!S.handle_release) {
        PyErr_SetString(PyExc_RuntimeError, "bus1py._messages.setup_calls was not called");
        return NULL;
    }
    struct b1_frame *f = (struct b1_frame *)(uintptr_t)addr;
    f->tag = tag;
    int64_t ts = b1py_send(f, slot, id, dest, 0, PyBytes_AS_STRING(args[4]), (uint32_t)PyBytes_GET_SIZE(args[4]),
                           nh, flags);
    f->tag = 0;
    if (ts >= 0 && release) S.handle_release(f->base, slot, id, dest);
    return PyLong_FromLongLong(ts);
}

/* partial_send(frame, slot, id, dests, payload, flags, errors, cap) -> r | None:
 * b1_frame_send_partial (address given by setup_partial) to the handle ids of the list or
 * tuple `dests` (1 to `cap`, the frame's room), copied into the frame, with `payload` and
 * no carried handles; each destination's error left at the address `errors`.  None,
 * nothing sent, when dests or payload is not of that shape: the caller's general path. */
static PyObject *py_partial_send(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NEED_ARGS(8);
    uint64_t addr, id, errs;
    uint32_t slot, flags, cap;
    if (!as_u64(args[0], &addr) || !as_u32(args[1], &slot) || !as_u64(args[2], &id) ||
        !as_u32(args[5], &flags) || !as_u64(args[6], &errs) || !as_u32(args[7], &cap))
        return NULL;
    if (!b1py_send_partial) {
        PyErr_SetString(PyExc_RuntimeError, "bus1py._messages.setup_partial was not called");
        return NULL;
    }
    PyObject *dl = args[3], *payload = args[4];
    if ((!PyList_CheckExact(dl) && !PyTuple_CheckExact(dl)) || !PyBytes_CheckExact(payload) ||
        PyBytes_GET_SIZE(payload) > UINT32_MAX)
        Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(dl);
    PyObject **items = PySequence_Fast_ITEMS(dl);
    if (n < 1 || n > (Py_ssize_t)cap) Py_RETURN_NONE;
    struct b1_frame *f = (struct b1_frame *)(uintptr_t)addr;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t v;
        if (!PyLong_CheckExact(items[i]) || !as_u64(items[i], &v)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        f->dests[i] = v;
    }
    /* the GIL stays held, as for the Peer's send (peer.c): a send waits for no one */
    int64_t r = b1py_send_partial(f, slot, id, (uint32_t)n, PyBytes_AS_STRING(payload),
                               (uint32_t)PyBytes_GET_SIZE(payload), 0, flags, (int32_t *)(uintptr_t)errs);
    return PyLong_FromLongLong(r);
}

/* setup_partial(address of b1_frame_send_partial) */
static PyObject *py_setup_partial(PyObject *self, PyObject *arg) {
    uint64_t a;
    if (!as_u64(arg, &a) || !a) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a null function address");
        return NULL;
    }
    b1py_send_partial = (b1py_send_partial_fn)(uintptr_t)a;
    Py_RETURN_NONE;
}

/* setup_calls(Request, recv_node, handle_release): the class of a received request and the
 * addresses of b1_frame_recv_node and b1_handle_release. */
static PyObject *py_setup_calls(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t a, b;
    if (nargs != 3 || !PyType_Check(args[0]) || !S.message ||
        !PyType_IsSubtype((PyTypeObject *)args[0], S.message) || !as_u64(args[1], &a) || !a ||
        !as_u64(args[2], &b) || !b) {
        PyErr_SetString(PyExc_TypeError, "setup_calls needs a subclass of Message and two addresses (after setup)");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(S.request, (PyTypeObject *)args[0]);
    S.recv_node = (b1py_recv_node_fn)(uintptr_t)a;
    S.handle_release = (int (*)(void *, uint32_t, uint64_t, uint64_t))(uintptr_t)b;
    Py_RETURN_NONE;
}

/* The Message of f->infos[i], whose carried handles start at h; `pool` and `held` as
 * recv_many's.  *owned is set once a slice of it belongs to a Slice object (which gives
 * it back however this ends); until then the caller gives it back on failure. */
static inline __attribute__((always_inline)) PyObject *message_at(struct b1_frame *f, int i, const uint64_t *h, PyObject *held,
                            PyObject *pool, uint32_t slot, uint64_t id, struct ints *c, int *owned) {
    const struct b1_msg_info *in = &f->infos[i];
    PyObject *carried = handles_of(h, in->n_handles);
    if (!in->slice)
        return new_message(S.message, in, PyBytes_FromStringAndSize(f->buf + in->offset,
                                                                    (Py_ssize_t)in->len), carried, f->fds, c);
    if (!pool) {
        PyErr_SetString(PyExc_ValueError, "a slice received without a pool to view it in");
        Py_XDECREF(carried);
        return NULL;
    }
    /* the Slice first: made, it gives the record back however this ends */
    PyObject *sl = b1py_slice_new(PyTuple_GET_ITEM(held, 1), pool, in->offset, in->len, f->base, slot,
                                  id, in->slice);
    if (!sl) {
        Py_XDECREF(carried);
        return NULL;
    }
    *owned = 1;
    PyObject *view = b1py_slice_view(sl);
    if (view)
        Py_INCREF(view);
    else
        PyErr_NoMemory(); /* the slice or its export could not be made */
    PyObject *m = new_message(S.slice, in, view, carried, f->fds, c);
    if (m && PyObject_SetAttr(m, S.slice_attr, sl) < 0) Py_CLEAR(m);
    Py_DECREF(sl);
    return m;
}

/* `held` checked: NULL (with TypeError set) unless None or (pool, bus); *pool set */
static int held_pool(PyObject *held, PyObject **pool) {
    *pool = NULL;
    if (held == Py_None) return 1;
    if (!PyTuple_Check(held) || PyTuple_GET_SIZE(held) != 2) {
        PyErr_SetString(PyExc_TypeError, "held must be None or (pool, bus)");
        return 0;
    }
    *pool = PyTuple_GET_ITEM(held, 0);
    return 1;
}

PyObject *b1py_taken(struct b1_frame *f, uint32_t slot, uint64_t id, PyObject *held, PyObject *peer) {
    PyObject *pool;
    int owned = 0;
    struct ints c = {.peer = peer};
    PyObject *m = held_pool(held, &pool) ? message_at(f, 0, f->handles, held, pool, slot, id, &c, &owned)
                                         : NULL;
    ints_clear(&c);
    if (!m && !owned && f->infos[0].slice) S.slice_release(f->base, slot, id, f->infos[0].slice);
    return m;
}

/* recv_many(frame, slot, id, max, timeout_ns, flags, held, peer) -> [Message], or -errno:
 * b1_frame_recv_many and its batch.  `held` is None for copies, or (pool, bus) for
 * B1_RECV_NOCOPY: a slice's payload views its record's bytes (slice.c) and its message gets
 * `_slice`, a Slice (receive.SliceMessage). */
static PyObject *py_recv_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NEED_ARGS(8);
    uint64_t addr, id;
    uint32_t slot, max, flags;
    int64_t ns;
    PyObject *pool;
    if (!as_u64(args[0], &addr) || !as_u32(args[1], &slot) || !as_u64(args[2], &id) ||
        !as_u32(args[3], &max) || !as_i64(args[4], &ns) || !as_u32(args[5], &flags) ||
        !held_pool(args[6], &pool))
        return NULL;
    struct b1_frame *f = (struct b1_frame *)(uintptr_t)addr;
    int r;
    if (ns == 0) {
        r = b1py_recv_many(f, slot, id, max, 0, flags);
    } else {
        Py_BEGIN_ALLOW_THREADS
        r = b1py_recv_many(f, slot, id, max, ns, flags);
        Py_END_ALLOW_THREADS
    }
    if (r < 0) return PyLong_FromLong(r);
    PyObject *out = PyList_New(r);
    if (!out) return NULL;
    const uint64_t *h = f->handles;
    struct ints c = {.peer = args[7]};
    int i = 0, owned = 0; /* the slices of infos[0..i + owned) belong to Slice objects */
    for (; i < r; i++) {
        owned = 0;
        PyObject *m = message_at(f, i, h, args[6], pool, slot, id, &c, &owned);
        if (!m) goto fail;
        h += f->infos[i].n_handles;
        PyList_SET_ITEM(out, i, m);
    }
    ints_clear(&c);
    return out;
fail:
    /* the list's unset items are NULL, which list_dealloc skips; the slices nothing holds
     * yet go back now, not at the peer's disconnect */
    for (int j = i + owned; j < r; j++)
        if (f->infos[j].slice) S.slice_release(f->base, slot, id, f->infos[j].slice);
    ints_clear(&c);
    Py_DECREF(out);
    return NULL;
}

/* send_many(frame, slot, id, dest, n, payloads, n_handles, flags) -> how many were sent, or
 * the first one's -errno when none was, or None (nothing sent) when `payloads` is not a
 * list or tuple of bytes: b1_frame_send_many without joining the payloads first.  The
 * destinations (n > 0) and carried handles are in the frame, as for b1_frame_send. */
static PyObject *py_send_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NEED_ARGS(8);
    uint64_t addr, id, dest;
    uint32_t slot, n, nh, flags;
    if (!as_u64(args[0], &addr) || !as_u32(args[1], &slot) || !as_u64(args[2], &id) ||
        !as_u64(args[3], &dest) || !as_u32(args[4], &n) || !as_u32(args[6], &nh) ||
        !as_u32(args[7], &flags))
        return NULL;
    PyObject *seq = args[5];
    if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq)) Py_RETURN_NONE;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < count; i++)
        if (!PyBytes_CheckExact(items[i]) || PyBytes_GET_SIZE(items[i]) > UINT32_MAX) Py_RETURN_NONE;
    struct b1_frame *f = (struct b1_frame *)(uintptr_t)addr;
    /* the GIL stays held (as in the Peer's send, peer.c): no other thread can change the list meanwhile */
    const char *ptrs[32];
    uint32_t lens[32];
    Py_ssize_t done = 0;
    while (done < count) {
        uint32_t k = count - done < 32 ? (uint32_t)(count - done) : 32;
        for (uint32_t i = 0; i < k; i++) {
            ptrs[i] = PyBytes_AS_STRING(items[done + i]);
            lens[i] = (uint32_t)PyBytes_GET_SIZE(items[done + i]);
        }
        int r = S.send_iov(f, slot, id, dest, n, ptrs, lens, k, nh, flags);
        if (r < 0) return done ? PyLong_FromSsize_t(done) : PyLong_FromLong(r);
        done += r;
        if ((uint32_t)r < k) break;
    }
    return PyLong_FromSsize_t(done);
}

static PyObject *py_exported(PyObject *mod, PyObject *mv) {
    if (!PyMemoryView_Check(mv)) {
        PyErr_SetString(PyExc_TypeError, "exported() takes a memoryview");
        return NULL;
    }
    return PyBool_FromLong(b1py_exported(mv));
}

static PyMethodDef methods[] = {
    {"exported", (PyCFunction)py_exported, METH_O, "exported(memoryview): is a buffer taken from it (or one sharing its buffer, as numpy makes) still alive?"},
    {"setup", (PyCFunction)(void (*)(void))py_setup, METH_FASTCALL, "setup(Message, SliceMessage, types, recv_many, recv, send, slice_release, send_iov)"},
    {"setup_calls", (PyCFunction)(void (*)(void))py_setup_calls, METH_FASTCALL,
     "setup_calls(Request, recv_node, handle_release)"},
    {"partial_send", (PyCFunction)(void (*)(void))py_partial_send, METH_FASTCALL,
     "partial_send(frame, slot, id, dests, payload, flags, errors, cap) -> r | None"},
    {"setup_partial", (PyCFunction)py_setup_partial, METH_O, "setup_partial(address of b1_frame_send_partial)"},
    {"tagged_send", (PyCFunction)(void (*)(void))py_tagged_send, METH_FASTCALL,
     "tagged_send(frame, slot, id, dest, payload, n_handles, flags, tag, release) -> ts | -errno"},
    {"recv", (PyCFunction)(void (*)(void))py_recv, METH_FASTCALL, "recv(frame, slot, id, timeout_ns, peer) -> Message | -errno"},
    {"recv_node", (PyCFunction)(void (*)(void))py_recv_node, METH_FASTCALL,
     "recv_node(frame, slot, id, node, watch, timeout_ns, tag, peer) -> Message | -errno | 1"},
    {"recv_many", (PyCFunction)(void (*)(void))py_recv_many, METH_FASTCALL,
     "recv_many(frame, slot, id, max, timeout_ns, flags, held, peer) -> list | -errno"},
    {"send_many", (PyCFunction)(void (*)(void))py_send_many, METH_FASTCALL,
     "send_many(frame, slot, id, dest, n, payloads, n_handles, flags) -> count | -errno | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "bus1py._messages",
                                    "The hot receive and send calls, building their Python objects in C.",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__messages(void) {
    S.empty = PyTuple_New(0);
    S.slice_attr = PyUnicode_InternFromString("_slice");
    S.reply_attr = PyUnicode_InternFromString("_reply");
    if (!S.empty || !S.slice_attr || !S.reply_attr) return NULL;
    PyTypeObject *slice_type = b1py_slice_type(), *peer_type = b1py_peer_type(), *reader_type = b1py_reader_type(),
                 *sender_type = b1py_sender_type();
    if (!slice_type || !peer_type || !reader_type || !sender_type) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (!mod) return NULL;
    if (PyModule_AddType(mod, slice_type) < 0 || PyModule_AddType(mod, peer_type) < 0 ||
        PyModule_AddType(mod, reader_type) < 0 || PyModule_AddType(mod, sender_type) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
