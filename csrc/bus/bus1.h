/*
 * bus1.h -- the C helper's public interface, as Python sees it through cffi.
 *
 * Everything between the cdef markers is parsed by cffi (bus1py/_build.py), so it holds
 * only plain declarations and integer #defines.  The shared-memory layout behind these
 * calls is private to csrc/ (layout.h).
 *
 * Conventions every call keeps:
 *   - `base` is this process's mapping of the bus segment; all links inside the segment are
 *     offsets or indices, never pointers, so every process may map it anywhere.
 *   - A peer is named by (slot, id): the slot locates it in the segment, the id (unique on
 *     the bus, never reused) proves the slot still holds the same peer.  Slots are reused
 *     once nothing names the old peer; its (slot, id) then reads ESHUTDOWN, like any
 *     disconnected peer.
 *   - Calls return 0 (or a non-negative value) on success and -errno on failure, and a
 *     failed call changes nothing visible.
 *
 * Behind it, one file and one header per concept, each calling only those below it
 * (tests/test_csrc_layers.py checks): proc, kill < alloc < queue < slot < handle <
 * message < tx < node < peer < reap < bus, send, recv, fsck.  A layer that owes work to one
 * above it returns the work (handle.h: NODE_RELEASE notices) instead of calling up.
 * Lock rule everywhere: one peer lock at a time; a *_locked function runs under one and
 * takes none (also checked there).
 */
#ifndef BUS1PY_BUS1_H
#define BUS1PY_BUS1_H
#include <stdint.h>

/* cdef-begin */
#define B1_VERSION 15
#define B1_HANDLE_INVALID 0xffffffffffffffff

#define B1_MSG_DATA 0
#define B1_MSG_NODE_DESTROY 1
#define B1_MSG_NODE_RELEASE 2

/* send flags */
#define B1_SEND_UNREACHABLE_ERROR 1  /* EHOSTUNREACH when every destination is known dead */
#define B1_SEND_CONTINUE 4           /* b1_send_partial's: each destination staged alone */
#define B1_SEND_SENDER_IDLE 8        /* -EAGAIN, nothing done, while the sender's own queue
                                        has a committed front (a topic takes it in first) */
#define B1_SEND_REQUEST 2  /* a request: its last carried handle is the reply capability
                              (EINVAL without one); the receiver's b1_msg_info.flags says so */

/* node flags (b1_node_create_flags) */
#define B1_NODE_QUIET 1  /* no notices: no NODE_RELEASE to its owner, no NODE_DESTROY to
                            anyone -- a reply node, whose holders come and go with every
                            request and which goes with its peer */

/* receive flags */
#define B1_RECV_NOCOPY 1  /* leave data payloads in the pool as slices (b1_slice_release) */

/* fault injection (bus1py stress --inject): deliberately broken ordering paths */
#define B1_INJECT_NONE 0
#define B1_INJECT_NO_BLOCK 1
#define B1_INJECT_NO_SYNC 2
#define B1_INJECT_ADDRESS_TIEBREAK 3
#define B1_INJECT_FIFO 4

/* Test-only kill points: b1_kill_at(point, after) arms the calling process to SIGKILL
 * itself when it passes `point` for the (after + 1)-th time.  Nothing is armed unless a
 * process calls b1_kill_at, so a bus used by other processes is never affected. */
enum b1_kill_point {
    B1_KILL_NONE = 0,
    B1_KILL_STAGE = 1,    /* a destination staged (its block in the queue, lock released) */
    B1_KILL_STAMP = 2,    /* the transaction stamped, nothing committed yet */
    B1_KILL_SYNC = 3,     /* a destination's clock synced to the stamp */
    B1_KILL_COMMIT = 4,   /* a destination committed */
    B1_KILL_LOCKED = 5,   /* holding a destination's queue lock, its block just inserted */
    B1_KILL_DESTROY = 6,  /* destroy: nodes marked, their notices staged, before the stamp */
    B1_KILL_RELEASE = 7,  /* release: the handle dropped, the owner's NODE_RELEASE not queued */
    B1_KILL_TRANSFER = 8, /* transfer: the target's handle made, the id not yet returned */
    B1_KILL_RECV = 9,     /* recv: the entry taken out of the queue, not yet copied or freed */
    B1_KILL_FDS_SENT = 10,  /* send: its descriptors posted under the sender's lock, the stamp
                               not yet stored */
    B1_KILL_FDS_TAKEN = 11, /* recv: a message's descriptors taken from the store under the
                               receiver's lock, the hold not yet over */
    B1_KILL_POINTS = 12
};

struct b1_limits {
    uint32_t max_peers;        /* peer slots in the segment */
    uint32_t max_nodes;        /* node slots */
    uint32_t max_handles;      /* handle slots (all peers together) */
    uint32_t max_entries;      /* queue entries (one per destination of a message in flight) */
    uint32_t max_payload;      /* bytes per message */
    uint32_t max_dests;        /* destinations per send */
    uint32_t max_msg_handles;  /* handles carried per message */
    uint32_t spin_ns;          /* how long recv spins on the front entry before sleeping */
    uint64_t pool_size;        /* bytes of the payload pool */
    uint32_t quota_messages;   /* default per-peer quotas (the receiver pays) */
    uint32_t quota_handles;
    uint64_t quota_bytes;
    uint32_t inject;           /* B1_INJECT_*: 0 for the correct algorithm */
    uint32_t inject_pause_ns;  /* pause between destinations in injected modes */
    uint32_t max_names;        /* well-known names (names.c); 0: no name table */
    uint32_t quota_fds;        /* per-peer quota of descriptors in flight to it (fds.c) */
};

/* One destination of a transaction, filled by b1_tx_prepare. */
struct b1_dest {
    uint64_t handle;      /* the sender's handle id for the destination node */
    uint64_t peer_id;     /* the node owner's peer id */
    uint64_t owner_handle;/* the owner's own handle id for the node (msg.destination) */
    uint32_t peer_slot;
    uint32_t node;
    uint32_t node_gen;
    uint32_t entry;       /* the queue entry staged for this destination */
    uint32_t state;       /* 0 prepared, 1 staged, 2 synced, 3 committed, 4 dropped */
    uint32_t pad;
};

/* A send transaction, stepped by b1_tx_* or run whole by b1_send. */
struct b1_tx {
    uint32_t sender_slot;
    uint32_t n;            /* destinations */
    uint64_t sender_id;
    uint64_t seq;          /* the sender's transaction sequence number */
    uint64_t max_ts;       /* running maximum of the destination clocks seen while staging */
    uint64_t ts;           /* the commit timestamp (even), 0 until stamped */
    uint32_t msg;          /* the message record in the pool */
    uint32_t type;         /* B1_MSG_* */
    struct b1_dest *dests;
};

/* all fields 64-bit, so Python reads the record with one ffi.unpack */
struct b1_msg_info {
    uint64_t ts;
    uint64_t sender;
    uint64_t seq;
    uint64_t destination;  /* the receiver's own handle id for the node */
    uint64_t type;
    uint64_t len;
    uint64_t n_handles;
    uint64_t left_ns;      /* after -EINTR from b1_recv_wait with a timeout: the time left */
    uint64_t offset;       /* where the payload is: in the caller's buffer, or (a slice)
                              from the segment base */
    uint64_t slice;        /* B1_RECV_NOCOPY: the token to give it back with (b1_slice_release);
                              0 when nothing is held */
    uint64_t n_fds;        /* descriptors received with it: the frame's fds[fds_at..+n_fds),
                              now the caller's to close */
    uint64_t fds_at;
    uint64_t flags;        /* B1_SEND_REQUEST when the message is a request */
    uint64_t tag;          /* the tag the sender's frame carried (b1_frame.tag), 0 if none */
};

struct b1_peer_info {
    uint64_t id;
    uint64_t clock;
    uint32_t state;
    uint32_t n_entries;        /* queued entries, staged and committed */
    uint32_t n_messages;       /* charged against quota_messages */
    uint32_t n_handles;        /* charged against quota_handles */
    uint64_t n_bytes;          /* charged against quota_bytes */
    uint32_t quota_messages;
    uint32_t quota_handles;
    uint64_t quota_bytes;
    uint64_t front_ts;         /* timestamp of the front entry, 0 when empty */
    uint64_t sent;
    uint64_t received;
    uint32_t lock_recoveries;  /* times a lock was taken over from a dead holder */
    uint32_t pinned;           /* used by more processes than are recorded: never reaped */
    int32_t pids[8];           /* processes that used the peer (0: none) */
    uint32_t n_fds;            /* descriptors in flight to it, charged against quota_fds */
    uint32_t quota_fds;
    uint32_t n_chargers;       /* shares of its quotas that senders hold (fair shares) */
    uint32_t share_messages[16]; /* n_messages, n_fds, n_bytes by share: a sender with id i */
    uint32_t share_fds[16];      /* charges share i % 16 */
    uint64_t share_bytes[16];
    uint32_t share_handles[16];
};

struct b1_gc_stats {
    uint32_t peers_reaped;     /* peers whose processes had all died */
    uint32_t blocks_completed; /* blocks of dead senders committed at their stamp */
    uint32_t blocks_removed;   /* copies of dead senders' messages that had no stamp yet (in
                                  a queue or not yet staged), and entries dead receivers
                                  had taken out of their queues */
    uint32_t live_peers;       /* connected peers with a live process (or never used) */
};

struct b1_bus_info {
    uint32_t version;
    uint32_t inject;
    uint64_t segment_size;
    uint32_t peers_used;       /* peer slots not free: connected, or gone but still named */
    uint32_t entries_used;
    uint32_t nodes_used;       /* node slots not free (alive, or destroyed and still named) */
    uint32_t handles_used;     /* handle slots held or in flight */
    uint64_t pool_used;
    uint64_t pool_size;
    int32_t creator_pid;
    uint32_t creator_alive;
    struct b1_limits limits;
    /* where the tables start (peers, nodes, handles, entries, pool) and the size of one
     * slot of each table: for tests that damage a segment on purpose */
    uint64_t table_offsets[5];
    uint32_t slot_sizes[4];
    uint64_t names_offset;     /* the name table's first slot (names.c) */
    uint32_t names_used;       /* names in the table, dead or alive (a snapshot) */
    uint32_t names_slots;      /* its slots: a power of two, at least 2 * max_names */
    uint32_t name_slot_size;
    uint32_t names_head_size;  /* the table's head, before its first slot */
    uint32_t names_tombs;      /* removed slots not yet cleared (a snapshot) */
    uint32_t pad2;
};

uint64_t b1_segment_size(const struct b1_limits *l);
int b1_init(void *base, uint64_t size, const struct b1_limits *l);
int b1_attach(void *base, uint64_t size);
int b1_bus_info(void *base, struct b1_bus_info *out);
/* The offset of a field of the segment's records by its name ("b1_peer.shares"), or a
 * record's size by its own ("b1_share"); -ENOENT for a name bus.c does not list.  For
 * tests that damage a segment on purpose: they read the layout the compiler made. */
int b1_layout_offset(const char *name);
/* Claim a bus whose every holder is dead, as the reaper decides death (its creator and the
 * recorded processes of every peer not free or disconnected; a pinned peer is alive): 0
 * when this process now holds the claim -- it alone may unlink the name -- -EBUSY while a
 * holder lives, -EALREADY while another live process holds the claim.  A claimant that
 * died is taken over by the next one. */
int b1_bus_reclaim(void *base);
/* After a won claim (b1_bus_reclaim), the name unlinked: remove the descriptor store
 * paths (csrc/bus/fds.c) of every peer slot that names one, so nothing the bus made
 * outside the segment outlives it. */
void b1_bus_unlink_stores(void *base);
void b1_process_init(void);

int b1_peer_new(void *base, uint32_t quota_messages, uint32_t quota_handles,
                uint64_t quota_bytes, uint32_t *slot, uint64_t *id);
int b1_peer_attach(void *base, uint32_t slot, uint64_t id, int32_t pid);
/* the number of other live processes still using the peer (0: the caller was the last) */
int b1_peer_detach(void *base, uint32_t slot, uint64_t id, int32_t pid);
int b1_peer_disconnect(void *base, uint32_t slot, uint64_t id);
/* bus1's PEER_RESET: the peer's nodes destroyed in one transaction (NODE_DESTROY to their
 * holders), every committed message in its queue dropped, every handle reference it holds
 * released; the peer stays connected (csrc/bus/reset.c).  -EBUSY while another live process
 * resets it. */
int b1_peer_reset(void *base, uint32_t slot, uint64_t id);
int b1_peer_query(void *base, uint32_t slot, uint64_t id, struct b1_peer_info *out);
/* any slot, connected or not (admin listing): -ENOENT past the last used slot */
int b1_peer_at(void *base, uint32_t slot, struct b1_peer_info *out);
int b1_peer_ready(void *base, uint32_t slot, uint64_t id);
int b1_peer_watch(void *base, uint32_t slot, uint64_t id, int last, int64_t timeout_ns);
uint32_t b1_peer_wake_seq(void *base, uint32_t slot);  /* trivial: benchmarks time a bare call */
int b1_gc(void *base, struct b1_gc_stats *out);
/* b1_gc, then every free list and usage counter rebuilt from the objects' states, for a
 * caller that holds the bus alone (rebuild.c): what kills between two stores leaked is
 * given back.  -EBUSY when a connected peer still names another live process. */
int b1_gc_sole(void *base, struct b1_gc_stats *out);

/* For a death watcher (bus1py/watch.py): the distinct live holders recorded in the
 * connected, unpinned peers (at most cap into out), each with its exec marker (fd -1:
 * none known), and in *dead the number of peers gc would act on now (every recorded
 * process dead or exec'd, or a disconnect whose disconnector died).  Returns how many
 * holders, or -errno. */
struct b1_watched {
    int32_t pid;
    int32_t marker_fd;    /* /proc/PID/fd/marker_fd no longer marker_ino: it exec'd */
    uint64_t marker_ino;
};
int b1_peer_watchlist(void *base, struct b1_watched *out, uint32_t cap, uint32_t *dead);
/* this process's exec marker (proc.h): clearing its O_CLOEXEC hands the peers this
 * process holds across exec; -errno when it cannot be made */
int b1_exec_marker(void);
/* a counter bumped whenever a process is recorded as a peer's holder: a watcher rescans
 * when it moved (lock-free, one load) */
uint32_t b1_holders_epoch(void *base);

int b1_node_create(void *base, uint32_t slot, uint64_t id, uint64_t *handle);
int b1_node_create_flags(void *base, uint32_t slot, uint64_t id, uint32_t flags, uint64_t *handle);
int b1_handle_transfer(void *base, uint32_t slot, uint64_t id, uint64_t handle,
                       uint32_t to_slot, uint64_t to_id, uint64_t *out);
int b1_handle_release(void *base, uint32_t slot, uint64_t id, uint64_t handle);
/* destroy the nodes behind the owner's handles, in one transaction; stamp receives the
 * destruction's (timestamp, transaction seq) */
int b1_destroy(void *base, uint32_t slot, uint64_t id, const uint64_t *handles, uint32_t n,
               int release, uint64_t *stamp);

/* Well-known names (names.c): a name (1 to B1_NAME_MAX bytes, no NUL) for a node, to find
 * a service by.  b1_name_publish: the node behind `handle`, which the peer must own
 * (EREMOTE), alive (ESTALE), under `name` (EEXIST if a live node has it; EINVAL for a bad
 * name; ENOSPC when max_names are taken).  b1_name_lookup: the caller's own handle to the
 * named node, one more reference as a transfer makes (ENOENT: no live node of that name).
 * b1_name_unpublish: only the node's owner (EREMOTE), ENOENT when there is none.
 * b1_names_list: the live names from table slot *cursor on, at most cap of them; returns
 * how many and moves *cursor past what it read (names_slots when done). */
#define B1_NAME_MAX 255
struct b1_name_info {
    uint64_t owner_id;     /* the node's owner peer */
    uint64_t node;         /* the node's index in the node table */
    uint32_t len;
    char name[256];        /* len bytes, NUL-ended */
};
int b1_name_publish(void *base, uint32_t slot, uint64_t id, uint64_t handle, const char *name,
                    uint32_t len);
int b1_name_lookup(void *base, uint32_t slot, uint64_t id, const char *name, uint32_t len,
                   uint64_t *out);
int b1_name_unpublish(void *base, uint32_t slot, uint64_t id, const char *name, uint32_t len);
int b1_names_list(void *base, struct b1_name_info *out, uint32_t cap, uint32_t *cursor);

/* the transaction, step by step (each step is one queue operation) */
int b1_tx_prepare(void *base, struct b1_tx *tx, uint32_t slot, uint64_t id,
                  const uint64_t *dests, uint32_t n, const char *payload, uint32_t len,
                  const uint64_t *handles, uint32_t n_handles, uint32_t flags);
int b1_tx_stage(void *base, struct b1_tx *tx, uint32_t i);
int b1_tx_stamp(void *base, struct b1_tx *tx);
int b1_tx_sync(void *base, struct b1_tx *tx, uint32_t i);
int b1_tx_commit(void *base, struct b1_tx *tx, uint32_t i);
void b1_tx_abort(void *base, struct b1_tx *tx);

/* the whole send in one call: returns the message's timestamp (> 0) and stores the
 * transaction's sequence number in *seq, or returns -errno */
int64_t b1_send(void *base, uint32_t slot, uint64_t id, const uint64_t *dests, uint32_t n,
                const char *payload, uint32_t len, const uint64_t *handles,
                uint32_t n_handles, uint32_t flags, uint64_t *seq);

/* receive the front entry if committed: -EAGAIN when empty or blocked; the receiver's
 * ids of carried handles go to handles_out (room for max_msg_handles) */
int b1_recv(void *base, uint32_t slot, uint64_t id, struct b1_msg_info *info,
            char *buf, uint32_t buflen, uint64_t *handles_out);
/* the same, waiting: timeout_ns < 0 waits forever; -ETIMEDOUT, -EINTR */
int b1_recv_wait(void *base, uint32_t slot, uint64_t id, struct b1_msg_info *info,
                 char *buf, uint32_t buflen, uint64_t *handles_out, int64_t timeout_ns);

/* A per-thread call frame for the two hot calls.  The Python side builds one per thread
 * (the mapping and the scratch buffers), so a send or a receive crosses cffi with a few
 * scalars instead of up to eleven arguments: each argument costs 10-20 ns to convert,
 * about as much as the queue operation itself. */
struct b1_frame {
    void *base;
    uint64_t *dests;           /* room for max_dests handle ids */
    uint64_t *handles;         /* room for max_msg_handles: carried (send), received (recv) */
    char *buf;                 /* room for buflen bytes: the received payload */
    uint32_t buflen;
    uint32_t tag;              /* carried by the next b1_frame_send's message (info.tag at its
                                  receiver), which resets it to 0: a call's and its reply's */
    uint64_t seq;              /* out of b1_frame_send: the transaction's sequence number */
    struct b1_msg_info info;   /* out of b1_frame_recv */
    struct b1_msg_info *infos; /* out of b1_frame_recv_many: room for infos_cap */
    uint32_t infos_cap;
    uint32_t n_handles;        /* out of b1_frame_recv_many: handles in f->handles, all told */
    int32_t *fds;              /* room for B1_MAX_FDS received descriptors (NULL: a message's
                                  descriptors are closed at its receive) */
};
/* Zero-copy send.  b1_send_reserve prepares b1_send's transaction in r->tx without
 * writing its payload, and returns where the caller writes it: `len` bytes at base + the
 * returned offset (bytes left unwritten are whatever the record held), or -errno.  One
 * destination goes in r->one; for n > 1 the caller points r->tx.dests at room for n.
 * b1_send_commit then runs it, returning b1_send's ts (r->tx.seq: its sequence number,
 * taken at the reserve) or -errno with nothing sent; b1_send_abort gives it all back.
 * Either ends the reservation: a second call returns -EINVAL.  Until then nothing is
 * queued. */
struct b1_reservation {
    struct b1_tx tx;
    struct b1_dest one;
};
int64_t b1_send_reserve(void *base, struct b1_reservation *r, uint32_t slot, uint64_t id,
                        const uint64_t *dests, uint32_t n, uint32_t len, const uint64_t *handles,
                        uint32_t n_handles, uint32_t flags);
int64_t b1_send_commit(void *base, struct b1_reservation *r);
int b1_send_abort(void *base, struct b1_reservation *r);

/* bus1's SEND_FLAG_CONTINUE: one transaction delivered to every destination that can take
 * it; errors[i] is 0 or the -errno of destination i that could not (EDQUOT over its quota,
 * EBADMSG its queue broken; a gone peer's is 0, dropped as b1_send drops it).  Returns the
 * ts (*seq its sequence number), 0 when no destination took it (nothing stamped), or
 * -errno when the send as a whole failed (b1_send's errors), nothing sent; the ts or 0
 * plus 1 when some errors[i] is set (a ts is even).  flags: 0 or B1_SEND_SENDER_IDLE. */
int64_t b1_send_partial(void *base, uint32_t slot, uint64_t id, const uint64_t *dests, uint32_t n,
                        const char *payload, uint32_t len, const uint64_t *handles,
                        uint32_t n_handles, uint32_t flags, int32_t *errors, uint64_t *seq);
/* b1_send_partial over the frame: n >= 1 destinations in f->dests, f->seq */
int64_t b1_frame_send_partial(struct b1_frame *f, uint32_t slot, uint64_t id, uint32_t n,
                              const char *payload, uint32_t len, uint32_t n_handles, uint32_t flags,
                              int32_t *errors);
/* b1_send over the frame: n destinations in f->dests, or with n == 0 the one destination
 * `dest` (the common unicast passes it as a scalar, no array write) */
int64_t b1_frame_send(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t dest, uint32_t n,
                      const char *payload, uint32_t len, uint32_t n_handles, uint32_t flags);
/* b1_recv_wait over the frame */
int b1_frame_recv(struct b1_frame *f, uint32_t slot, uint64_t id, int64_t timeout_ns);

/* Batches.  b1_frame_send_many: `count` payloads (lens[i] bytes each, back to back in
 * data) to the same destinations as b1_frame_send, each its own transaction with its own
 * stamp, in order; stops at the first failure.  Returns how many were sent, or the first
 * failure's -errno when none was (f->seq: the last one's sequence number). */
int b1_frame_send_many(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t dest, uint32_t n,
                       const char *data, const uint32_t *lens, uint32_t count,
                       uint32_t n_handles, uint32_t flags);
/* b1_frame_send_many with each payload where it is (payloads[i], lens[i] bytes) */
int b1_frame_send_iov(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t dest, uint32_t n,
                      const char *const *payloads, const uint32_t *lens, uint32_t count,
                      uint32_t n_handles, uint32_t flags);
/* Up to `max` (<= f->infos_cap) committed front entries in one lock hold, waiting as
 * b1_frame_recv only while the queue has none: f->infos[0..r) with the payloads packed
 * into f->buf and the carried handles into f->handles (room for max_msg_handles) while
 * they fit -- the first always does.  With B1_RECV_NOCOPY a data payload stays in the pool
 * as a slice, its record and the receiver's quota charged until b1_slice_release.
 * Returns how many (> 0) or -errno. */
int b1_frame_recv_many(struct b1_frame *f, uint32_t slot, uint64_t id, uint32_t max,
                       int64_t timeout_ns, uint32_t flags);
/* b1_frame_recv of one message addressed to `node` (the receiver's handle id): the first
 * such committed entry in queue order, taken from before the first uncommitted one; the
 * entries around it stay queued in their order.  With `watch` (a handle id, 0: none), a
 * NODE_DESTROY for it among those committed entries, or the handle already dead, ends the
 * wait with -ECONNRESET (the notice stays queued). */
int b1_frame_recv_node(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t node, uint64_t watch,
                       int64_t timeout_ns);
/* give back a slice (info.slice) received by the peer (slot, id) */
int b1_slice_release(void *base, uint32_t slot, uint64_t id, uint64_t slice);

/* File descriptors in messages (fds.c, bus1py/fds.py).  b1_send_fds names the descriptors
 * (at most B1_MAX_FDS, -EMSGSIZE) the calling thread's sends carry until it is called again
 * with n = 0: b1_send, b1_frame_send*, b1_send_reserve (which records their count) and
 * b1_send_commit (which posts them: the same ones must be named).  Each destination's
 * receiver gets its own copies, installed at its receive (b1_msg_info n_fds).
 * b1_fds_address: the filesystem path of the peer's store's inbox (in a directory only
 * the bus's users may enter, fds.c), its length, and in pair[0..1] the inode numbers of
 * its pair (0 when none was registered); a holder binds the inbox (SO_PASSCRED set first),
 * makes the pair (a, b) and registers the three, in that order, with b1_fds_register,
 * naming who may post (uid; gid >= 0 too for a group bus; root always), n = 0: forget them.
 * b1_fds_sweep closes the descriptors at the heads of the store's sockets whose messages
 * are no longer queued (after a reset, a gc), and any datagram not posted by a sender.
 * b1_fds_drain empties the sockets of a disconnected peer's store (every datagram popped,
 * its descriptors closed).
 * b1_fds_mover_address: the filesystem path of the calling process's mover socket on this
 * bus (in a directory only the bus's users may enter, named by the bus's nonce; the file
 * named by pid and pidfs inode), and its length: where a sender that finds an inbox full
 * asks its holders to move it; b1_fds_mover_stale: 1 when a file name in that directory
 * names a process that is gone (or a pid now another process's), 0 otherwise (alive, in
 * doubt, or not a mover's name);
 * b1_fds_wakeup, on a readable mover socket (SO_PASSCRED set before its bind), moves the
 * stores this process holds that were asked for by users they let post: how many
 * datagrams it moved. */
#define B1_MAX_FDS 256
int b1_send_fds(const int32_t *fds, uint32_t n);
int b1_fds_address(void *base, uint32_t slot, uint64_t id, char *out, uint32_t cap, uint64_t *pair);
int b1_fds_register(void *base, uint32_t slot, uint64_t id, const int32_t *socks, uint32_t n,
                    uint32_t uid, int64_t gid);
void b1_fds_drain(const int32_t *socks, uint32_t n);
int b1_fds_mover_address(void *base, char *out, uint32_t cap);
int b1_fds_mover_stale(const char *name);
int b1_fds_wakeup(int sock);
int b1_fds_sweep(void *base, uint32_t slot, uint64_t id);

/* arm (or with B1_KILL_NONE disarm) this process's kill point; -EINVAL for an unknown one */
int b1_kill_at(uint32_t point, uint32_t after);

/* Check the whole segment against every invariant (csrc/bus/fsck.c), on a quiet bus: the
 * number of problems found (0: clean), each described in one line of `out` (NUL-ended,
 * cut at outlen), or -errno. */
int b1_fsck(void *base, char *out, uint32_t outlen);

/* queue internals exposed for tests and benchmarks */
int b1_queue_check(void *base, uint32_t slot);   /* verifies tree order and counts */
int b1_queue_depth(void *base, uint32_t slot);
/* cdef-end */

#endif
