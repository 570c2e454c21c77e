/*
 * slice.h -- the Slice type of bus1py._messages (slice.c): a zero-copy message's hold on
 * its pool record, given back once, when released or collected.
 */
#ifndef BUS1PY_PY_SLICE_H
#define BUS1PY_PY_SLICE_H
#include <Python.h>
#include <stdint.h>

/* b1_slice_release, as bus1py._b1 gives its address */
typedef int (*b1py_slice_release_fn)(void *, uint32_t, uint64_t, uint64_t);

/* the type, ready (NULL with an exception set on failure); once, at module init */
PyTypeObject *b1py_slice_type(void);
/* where a Slice gives its record back; before the first b1py_slice_new */
void b1py_slice_setup(b1py_slice_release_fn release);
/* a held Slice of the record `token` of peer (slot, id), whose bytes are [offset, offset +
 * len) of the mapping under `pool` (the bus's read-only memoryview of it), on the bus
 * object `bus` mapped at `base` */
PyObject *b1py_slice_new(PyObject *bus, PyObject *pool, uint64_t offset, uint64_t len, void *base,
                         uint32_t slot, uint64_t id, uint64_t token);
/* the payload view of a held Slice (borrowed; NULL if making it failed) */
PyObject *b1py_slice_view(PyObject *slice);
/* is anything still reading memoryview mv's buffer: a buffer taken from it, or another
 * memoryview sharing its buffer (as numpy.frombuffer makes)?  Released: no */
int b1py_exported(PyObject *mv);

#endif
