/*
 * messages.h -- what messages.c shares with the other files of bus1py._messages: the
 * bus calls whose addresses `setup` took, and the Messages built from a frame.
 */
#ifndef BUS1PY_PY_MESSAGES_H
#define BUS1PY_PY_MESSAGES_H
#include <Python.h>
#include "bus1.h"

typedef int (*b1py_recv_many_fn)(struct b1_frame *, uint32_t, uint64_t, uint32_t, int64_t, uint32_t);
typedef int (*b1py_recv_fn)(struct b1_frame *, uint32_t, uint64_t, int64_t);
typedef int64_t (*b1py_send_fn)(struct b1_frame *, uint32_t, uint64_t, uint64_t, uint32_t,
                                const char *, uint32_t, uint32_t, uint32_t);

typedef int64_t (*b1py_send_partial_fn)(struct b1_frame *, uint32_t, uint64_t, uint32_t, const char *,
                                        uint32_t, uint32_t, uint32_t, int32_t *);
typedef int (*b1py_recv_node_fn)(struct b1_frame *, uint32_t, uint64_t, uint64_t, uint64_t, int64_t);

/* the bus calls, set by `setup` (all NULL before it) */
extern b1py_recv_many_fn b1py_recv_many;
extern b1py_recv_fn b1py_recv;
extern b1py_send_fn b1py_send;
extern b1py_send_partial_fn b1py_send_partial; /* b1_frame_send_partial (setup_partial) */

/* the Message b1_frame_recv left in f (f->info, f->buf, f->handles) */
PyObject *b1py_copied(const struct b1_frame *f, PyObject *peer);
/* b1_frame_recv_node (the GIL released while it waits) and the Message it took, or its
 * -errno as an int; `peer` as b1py_copied's */
PyObject *b1py_node_message(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t node, uint64_t watch,
                            int64_t ns, PyObject *peer);
/* the Message of the one message b1_frame_recv_many took into f->infos[0]; `held` is as
 * recv_many's (None, or (pool, bus) for B1_RECV_NOCOPY).  On failure a slice nothing
 * holds yet goes back to the pool. */
PyObject *b1py_taken(struct b1_frame *f, uint32_t slot, uint64_t id, PyObject *held, PyObject *peer);
/* (ts, id, seq), the stamp a send returns */
PyObject *b1py_stamp(int64_t ts, uint64_t id, uint64_t seq);

/* peer.recv(timeout, node=node) of a PeerCore (peer.c): its fast form when the arguments
 * fit it, else the Python method's; the Message, or NULL with an exception set.  *seq is
 * the sequence number (msg.stamp[2]) of a DATA message the fast form took, UINT64_MAX for
 * anything else */
PyObject *b1py_recv_node(PyObject *peer, PyObject *node, PyObject *timeout, uint64_t *seq);
/* this thread's frame of the PeerCore `peer` (peer.c), its slot and id, and the frame's
 * room for destinations; NULL with an exception set when it is no PeerCore or its bus is
 * closed */
struct b1_frame *b1py_peer_frame(PyObject *peer, uint32_t *slot, uint64_t *id, uint32_t *max_dests);
/* out[i] = the handle id items[i] (an exact int from 0 to 2**64-1) for each of n: 1; 0 when
 * one is not, with no exception left (peer.c) */
int b1py_handle_ids(PyObject *const *items, Py_ssize_t n, uint64_t *out);
/* a C type's constructor arguments: exactly n, by position, into out[] (borrowed): 1; else
 * 0 with TypeError naming the type (the last part of `type_name`) */
int b1py_positional(const char *type_name, PyObject *args, PyObject *kw, Py_ssize_t n, PyObject **out);
/* the types of topic.c, ready, or NULL with an exception set; once, at module init */
PyTypeObject *b1py_reader_type(void);
PyTypeObject *b1py_sender_type(void);

/* the PeerCore type (peer.c), ready, or NULL with an exception set; once, at module init */
PyTypeObject *b1py_peer_type(void);

#endif
