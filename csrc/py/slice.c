/*
 * slice.c -- bus1py._messages.Slice: what a zero-copy message holds of the pool
 * (receive.SliceMessage._slice), made by messages.c's recv_many.
 *
 * Invariants: a Slice is held from its making until its release.  The payload is not a
 * slice of the pool's view (whose exports the pool's view counts, so an array made from it
 * -- numpy takes a new memoryview sharing the payload's buffer -- would outlive a release
 * unseen) but the only memoryview made directly of a Span, an object of its own that
 * exports the record's bytes read-only: every buffer taken from the payload, however
 * indirectly, is counted on the payload's buffer.  A Span holds an export of the bus's
 * mmap, so the mapping stays while anything reads it, even after the bus is closed.
 * Releasing refuses (BufferError, nothing changed) while one lives; else it releases the
 * payload view (its Span goes with it), then gives the record back -- only in the process
 * that received it, and only while its bus is mapped (bus._base is not None).  A Slice
 * still held when it is collected releases itself, or, its view still exported, warns and
 * leaves the record charged (bytes someone still reads must not go back to the pool). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <pthread.h>
#include <unistd.h>
#include "slice.h"

static struct {
    PyObject *release_name;  /* "release" */
    PyObject *base_attr;     /* "_base" */
    pid_t pid;               /* this process's (kept by an atfork handler) */
    b1py_slice_release_fn slice_release;
} S;

typedef struct {
    PyObject_HEAD
    PyObject *bus;
    PyObject *view;     /* the message's payload: a memoryview of a Span */
    uint64_t base;      /* the bus's mapping in the receiving process */
    uint64_t id;
    uint64_t token;     /* b1_msg_info.slice */
    uint32_t slot;
    int held;
    pid_t pid;          /* the receiving process */
} Slice;

static PyTypeObject SliceType, SpanType;

/* 1 given back (or nothing left to give), 0 refused with BufferError set, -1 another error */
static int slice_give_back(Slice *sl) {
    if (!sl->held) return 1;
    if (sl->view && b1py_exported(sl->view)) return 0;
    /* none when making it failed: nobody can read the record then */
    if (sl->view) {
        PyObject *r = PyObject_CallMethodNoArgs(sl->view, S.release_name);
        if (!r) return PyErr_ExceptionMatches(PyExc_BufferError) ? 0 : -1;
        Py_DECREF(r);
    }
    sl->held = 0;
    if (sl->pid != S.pid) return 1; /* a forked child only drops its view */
    PyObject *base = PyObject_GetAttr(sl->bus, S.base_attr);
    if (!base) return -1;
    int mapped = base != Py_None;
    Py_DECREF(base);
    if (mapped) S.slice_release((void *)(uintptr_t)sl->base, sl->slot, sl->id, sl->token);
    return 1;
}

static PyObject *slice_release(Slice *sl, PyObject *unused) {
    int r = slice_give_back(sl);
    if (r > 0) Py_RETURN_NONE;
    if (r == 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_BufferError,
                        "the payload is still exported (a buffer obtained from it, such as a numpy "
                        "array, is alive): drop that first, then release");
    }
    return NULL;
}

static void slice_dealloc(Slice *sl) {
    if (sl->held) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        int r = slice_give_back(sl);
        if (r == 0) {
            PyErr_Clear();
            /* an export outlives the message: keep the record rather than free bytes in use */
            if (PyErr_WarnEx(PyExc_ResourceWarning, "a zero-copy payload was still exported when its "
                             "message was collected: its pool record stays charged", 1) < 0)
                PyErr_WriteUnraisable((PyObject *)sl);
        } else if (r < 0) {
            PyErr_WriteUnraisable((PyObject *)sl);
        }
        PyErr_Restore(type, value, tb);
    }
    Py_XDECREF(sl->bus);
    Py_XDECREF(sl->view);
    Py_TYPE(sl)->tp_free((PyObject *)sl);
}

static PyMethodDef slice_methods[] = {
    {"release", (PyCFunction)slice_release, METH_NOARGS, "give the record back (see SliceMessage.release)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef slice_members[] = {
    {"token", T_ULONGLONG, offsetof(Slice, token), READONLY, "b1_slice_release's token"},
    {"held", T_INT, offsetof(Slice, held), READONLY, "not yet given back"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SliceType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bus1py._messages.Slice",
    .tp_basicsize = sizeof(Slice),
    .tp_dealloc = (destructor)slice_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A zero-copy message's hold on its pool record.",
    .tp_methods = slice_methods,
    .tp_members = slice_members,
};

static void after_fork_in_child(void) {
    S.pid = getpid();
}

void b1py_slice_setup(b1py_slice_release_fn release) {
    S.slice_release = release;
}

PyTypeObject *b1py_slice_type(void) {
    S.release_name = PyUnicode_InternFromString("release");
    S.base_attr = PyUnicode_InternFromString("_base");
    if (!S.release_name || !S.base_attr) return NULL;
    S.pid = getpid();
    if (pthread_atfork(NULL, NULL, after_fork_in_child)) {
        PyErr_NoMemory();
        return NULL;
    }
    return PyType_Ready(&SliceType) < 0 || PyType_Ready(&SpanType) < 0 ? NULL : &SliceType;
}

int b1py_exported(PyObject *mv) {
    PyMemoryViewObject *v = (PyMemoryViewObject *)mv;
    if (v->flags & _Py_MEMORYVIEW_RELEASED) return 0;
    /* a buffer taken from it, or another memoryview sharing its buffer (numpy's) */
    return v->exports > 0 || v->mbuf->exports > 1;
}

/* A record's bytes, exported read-only; holding an export of the mapping (`map`). */
typedef struct {
    PyObject_HEAD
    Py_buffer map;
    char *ptr;
    Py_ssize_t len;
} Span;

static int span_getbuffer(Span *sp, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)sp, sp->ptr, sp->len, 1, flags);
}

static void span_dealloc(Span *sp) {
    if (sp->map.obj) PyBuffer_Release(&sp->map);
    Py_TYPE(sp)->tp_free((PyObject *)sp);
}

static PyBufferProcs span_as_buffer = {.bf_getbuffer = (getbufferproc)span_getbuffer};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bus1py._messages.Span",
    .tp_basicsize = sizeof(Span),
    .tp_dealloc = (destructor)span_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A zero-copy payload's bytes in the pool (the buffer of its memoryview).",
    .tp_as_buffer = &span_as_buffer,
};

/* the payload view of bytes [offset, offset + len) of the mapping under the read-only
 * view `pool` (its mmap exports them to the Span), or NULL with an exception set */
static PyObject *payload_of(PyObject *pool, uint64_t offset, uint64_t len) {
    if (!PyMemoryView_Check(pool) || (((PyMemoryViewObject *)pool)->flags & _Py_MEMORYVIEW_RELEASED) ||
        !PyMemoryView_GET_BASE(pool)) {
        PyErr_SetString(PyExc_ValueError, "the pool must be a live memoryview of the mapping");
        return NULL;
    }
    Span *sp = PyObject_New(Span, &SpanType);
    if (!sp) return NULL;
    sp->map.obj = NULL;
    if (PyObject_GetBuffer(PyMemoryView_GET_BASE(pool), &sp->map, PyBUF_SIMPLE) < 0) {
        Py_DECREF(sp);
        return NULL;
    }
    if (offset > (uint64_t)sp->map.len || len > (uint64_t)sp->map.len - offset) {
        PyErr_SetString(PyExc_ValueError, "a slice beyond the mapping");
        Py_DECREF(sp);
        return NULL;
    }
    sp->ptr = (char *)sp->map.buf + offset;
    sp->len = (Py_ssize_t)len;
    PyObject *view = PyMemoryView_FromObject((PyObject *)sp);
    Py_DECREF(sp); /* the view's buffer holds it */
    return view;
}

PyObject *b1py_slice_new(PyObject *bus, PyObject *pool, uint64_t offset, uint64_t len, void *base,
                         uint32_t slot, uint64_t id, uint64_t token) {
    Slice *sl = PyObject_New(Slice, &SliceType);
    if (!sl) return NULL;
    Py_INCREF(bus);
    sl->bus = bus;
    sl->view = payload_of(pool, offset, len);
    if (!sl->view) PyErr_Clear(); /* the message then has no payload: made below */
    sl->base = (uint64_t)(uintptr_t)base;
    sl->id = id;
    sl->token = token;
    sl->slot = slot;
    sl->pid = S.pid;
    sl->held = 1;
    return (PyObject *)sl;
}

PyObject *b1py_slice_view(PyObject *slice) { return ((Slice *)slice)->view; }
