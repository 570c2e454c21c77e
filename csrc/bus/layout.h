/*
 * layout.h -- the shared-memory layout of a bus (version B1_VERSION).
 *
 * One POSIX shared-memory object holds the whole bus:
 *
 *   [header | peers[max_peers] | nodes[max_nodes] | handles[max_handles] |
 *    entries[max_entries] | payload pool | name table (head, slots[names_slots])]
 *
 * Invariants:
 *   - Links are 32-bit indices (0 means "none"; index 0 of every table is never used) or
 *     64-bit byte offsets from the segment base: the segment maps at any address.
 *   - Each peer's queue (tree, clock, counters) is guarded by that peer's robust,
 *     process-shared mutex.  Node fields and the holder lists of handles are guarded by
 *     the node owner's mutex.  No code path holds two of those at once; a peer's
 *     descriptor store's mover lock (fd_mover, fds.c) is a leaf taken under them.
 *   - The tables and the pool are carved lazily by atomic bump pointers and recycled
 *     through lock-free Treiber stacks whose heads carry an ABA tag; these are the only
 *     bus-wide shared words, and they are never locked.
 *   - A clock is always even; odd timestamps are blocks (staged entries).
 *   - The header's magic is written last on creation, with release order: a process that
 *     sees the magic sees a fully initialised segment.
 */
#ifndef BUS1PY_LAYOUT_H
#define BUS1PY_LAYOUT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include "bus1.h"

#define B1_MAGIC 0x7962317375627962ULL /* "bybus1by" */
#define B1_POOL_MIN_SHIFT 6            /* pool units: 64 bytes */
#define B1_POOL_CLASSES 22             /* payload room up to 2^27 = 128 MiB */
/* A record of class c holds its header (struct b1_msg, rounded up to one unit, so records stay
 * unit-aligned) plus 2^(c+6) bytes: a payload of a power of two fits the class of its size
 * (4 KiB in a 4 KiB + 64 B record, not the next power of two). */
#define B1_CLASS_BYTES(c) (((uint64_t)1 << ((c) + B1_POOL_MIN_SHIFT)) + ((uint64_t)1 << B1_POOL_MIN_SHIFT))
#define B1_USAGE_SHARDS 64
/* shares of a receiver's quota (queue.h b1_charge_locked): a sending peer charges share
 * (id mod B1_CHARGERS) */
#define B1_CHARGERS 16

/* A peer slot goes FREE -> ACTIVE (b1_peer_new) -> DISCONNECTING -> DISCONNECTED -> FREE
 * (reclaimed once nothing names the slot: no handle, node or queued entry; slot.c). */
enum { B1_PEER_FREE = 0, B1_PEER_ACTIVE = 1, B1_PEER_DISCONNECTED = 2, B1_PEER_DISCONNECTING = 3 };
enum { B1_NODE_FREE = 0, B1_NODE_ALIVE = 1, B1_NODE_DESTROYING = 2, B1_NODE_DESTROYED = 3 };
#define B1_PEER_PIDS 8
enum { B1_DEST_PREPARED, B1_DEST_STAGED, B1_DEST_SYNCED, B1_DEST_COMMITTED, B1_DEST_DROPPED };

/* max_peers is at most this: an entry names its queue's slot in 16 bits */
#define B1_MAX_PEERS 65535u

/* A process that uses a peer, as recorded in the peer (proc.h names its identity). */
struct b1_holder {
    int32_t pid;          /* 0: none */
    int32_t marker_fd;    /* its exec marker's number, -1 when unknown */
    uint64_t start;       /* start time in clock ticks after boot, 0 when unknown */
    uint64_t ino;         /* inode number of its pidfd (pidfs), 0 when unknown */
    uint64_t marker_ino;  /* inode number of its exec marker, 0 when unknown */
};

/* A lock-free stack of free slots: head = (tag << 32) | index. */
typedef struct { _Atomic uint64_t head; } b1_stack;

struct b1_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t segment_size;
    struct b1_limits limits;
    uint64_t off_peers, off_nodes, off_handles, off_entries, off_pool;
    uint64_t off_names;

    int32_t creator_pid;               /* the process that created the bus (admin listing) */
    uint32_t pad0;
    uint64_t creator_start;
    uint64_t nonce[2];                 /* random at creation: names the bus's directory of mover
                                          sockets (fds.c), read once at attach (b1_view) */
    _Atomic uint64_t orphan_reaper;    /* owner token of the gc sweeping orphans (reap.c) */
    _Atomic uint64_t reclaimer;        /* owner token of the process that found every holder
                                          dead and takes the bus's name over (bus.c) */
    _Atomic uint32_t holders_epoch;    /* bumped when a process is recorded as a peer's holder
                                          (peer.c): death watchers rescan when it moves */
    uint32_t pad1;
    _Atomic uint64_t next_peer_id;     /* ids are unique and never reused */
    _Atomic uint32_t peers_bump;       /* next never-used slot of each table */
    _Atomic uint32_t nodes_bump;
    _Atomic uint32_t handles_bump;
    _Atomic uint32_t entries_bump;
    b1_stack free_nodes, free_handles, free_peers;
    _Atomic uint64_t pool_bump;        /* bytes of the pool carved so far */
    /* a send pops an entry and a record, a receive pushes both back: those stack heads
     * share one cache line (records up to 4 KiB), so a message moves one line for both */
    b1_stack free_entries __attribute__((aligned(64)));
    b1_stack pool_free[B1_POOL_CLASSES];
    /* usage counters, sharded by process so that senders and receivers on different CPUs
     * do not bounce one cache line; their sums are the bus's usage */
    struct {
        _Atomic int64_t entries;       /* entries in use */
        _Atomic int64_t pool;          /* bytes in live message records */
        char pad[48];
    } usage[B1_USAGE_SHARDS] __attribute__((aligned(64)));
};

/* What the senders folded into one share hold of a receiver's quota (guarded by the
 * receiver's lock): data messages queued, staged or held as slices, their bytes, and their
 * descriptors not yet taken -- the receiver's n_messages, n_bytes, n_fds split by sender. */
struct b1_share {
    uint32_t messages;
    uint32_t fds;
    uint64_t bytes;
};

/* A peer: one queue with its lock and clock, plus accounting.
 * DISCONNECTING: the peer is destroying its nodes on its way out; nothing new is staged
 * into its queue, but its own destruction transaction may still stamp. */
struct b1_peer {
    /* Grouped by cache line: a message crosses from the sender's CPU to the receiver's
     * through the receiving peer's first two lines only (the lock and the tree; the
     * clock, quota use and the front's publication), so a send and a receive each move
     * two lines of it.  The rest is cold. */
    /* line 0 */
    pthread_mutex_t lock;
    /* --- guarded by lock --- */
    uint64_t id;
    uint32_t state;
    uint32_t root;         /* treap root (entry index) */
    uint32_t front;        /* leftmost entry, 0 when empty */
    uint32_t back;         /* rightmost entry, 0 when empty */
    /* line 1 */
    uint64_t clock;
    uint64_t n_bytes;      /* payload bytes of data messages queued or staged (quota_bytes) */
    uint64_t quota_bytes;
    uint64_t received;
    uint32_t n_entries;
    uint32_t n_messages;   /* data messages queued or staged here (quota_messages) */
    uint32_t quota_messages;
    /* --- read without the lock --- */
    _Atomic uint32_t wake_seq;  /* futex word: bumped whenever the front changes (any
                                   change while node_waiters) */
    _Atomic uint64_t front_ts;  /* ts of the front entry, 0 when empty */
    _Atomic uint32_t waiters;   /* processes or threads sleeping on wake_seq, and
                                   B1_WAITERS_WOKEN: a wake since the last one looked */
    _Atomic uint32_t node_waiters; /* of them, those waiting for one node's entry (recv.c),
                                      woken by every change of the queue, not only its front */
    /* cold */
    uint32_t quota_handles;
    uint32_t lock_initialised;
    uint32_t lock_recoveries;
    uint32_t broken;       /* a takeover found damage it could not repair: every lock of
                              the peer fails with EBADMSG from then on (queue.c) */
    uint32_t unverified;   /* a takeover of the lock left the holder lists of the peer's
                              nodes to verify: done by the next b1_lock_nodes (handle.c) */
    uint64_t fifo_counter; /* B1_INJECT_FIFO only: arrival order (guarded by lock) */
    uint32_t n_nodes;      /* nodes owned by this slot's peers and not yet freed (guarded
                              by lock): a destroyed node of a gone peer pins the slot */
    _Atomic uint32_t next_free; /* free-stack link while FREE */
    uint32_t pinned;       /* more holder processes than pids[] records: never reaped */
    _Atomic uint64_t disconnector; /* owner token of the process running the disconnect
                                      (DISCONNECTING): gc finishes it when that one died */
    _Atomic uint64_t resetter;     /* owner token of the process running a reset (reset.c),
                                      0 when none: gc finishes it when that one died */
    uint32_t held;         /* zero-copy slices given out and not yet given back: a list of
                              entries (B1_TS_HELD, linked by left/right), freed at the
                              latest when the peer is flushed (guarded by lock) */
    struct b1_holder holders[B1_PEER_PIDS]; /* processes that used the peer (pid 0: none),
                                               each by an identity no later one shares */
    uint64_t fd_nonce[2];  /* random, set when the slot gets a peer: names its descriptor
                              store's directory (fds.c), new for each peer of the slot */
    uint32_t n_fds;        /* descriptors of the data messages queued or staged here, not yet
                              taken (quota_fds; guarded by lock) */
    uint32_t quota_fds;
    uint32_t pad_fds;
    _Atomic uint64_t fd_pair[2]; /* inode numbers of its store's pair (fds.c), written by its
                                    holders, read by a joining holder to find them */
    pthread_mutex_t fd_mover; /* its store's mover lock (fds.c): a leaf, robust, held by
                                 whoever reads or pops its inbox */
    _Atomic uint32_t n_handles; /* handle slots of this peer, held or in flight (quota_handles) */
    _Atomic uint64_t tx_seq;    /* the peer's next transaction sequence number */
    _Atomic uint64_t sent;
    uint32_t n_chargers;   /* shares[] holding a message (guarded by lock) */
    uint32_t pad_shares;
    struct b1_share shares[B1_CHARGERS]; /* n_messages, n_bytes, n_fds by sender (guarded
                                            by lock; queue.h) */
    _Atomic uint32_t share_handles[B1_CHARGERS]; /* n_handles by charger (lock-free, as
                                                    n_handles; queue.h) */
} __attribute__((aligned(64)));
_Static_assert(offsetof(struct b1_peer, clock) == 64 && offsetof(struct b1_peer, waiters) < 128,
               "the lock and the tree fill line 0, the rest of a message's path line 1");

/* A node: owned by one peer forever.  Guarded by the owner's lock.
 * Its destruction is the key (destroy_ts, owner_id, destroy_seq): a message to the node,
 * or carrying a handle to it, is before the destruction iff its key is below that one. */
struct b1_node {
    uint64_t owner_id;
    uint32_t owner_slot;
    uint32_t gen;            /* bumped at each reuse of the slot */
    uint64_t owner_handle;   /* the owner's handle id */
    uint64_t destroy_ts;     /* set when the destruction is stamped */
    uint64_t destroy_seq;
    uint32_t state;          /* B1_NODE_* */
    uint32_t holders;        /* non-owner handles (held or in flight), via next_holder */
    uint32_t holders_version;/* bumped whenever a holder is added: a destruction that saw
                                an older version restarts, so it notifies every holder */
    uint32_t release_pending;/* a NODE_RELEASE is queued and not yet read */
    uint32_t owner_handle_live;
    uint32_t owner_notified; /* the owner has read its NODE_DESTROY (or is gone) */
    _Atomic uint32_t next_free;
    uint32_t destroy_msg;    /* the record of the destruction being stamped (0: none): its
                                stamp decides a cut one (handle.c b1_lock_nodes) */
    uint64_t release_owner;  /* owner token of the process that set release_pending: it
                                queues the notice (node.c re-sends it if that one died) */
    uint64_t destroyer;      /* owner token of the process whose destruction marked it
                                DESTROYING: gc rolls a dead one's unstamped one back */
    uint32_t flags;          /* B1_NODE_*, set at creation */
    uint32_t pad;
};

/* A handle: a peer's reference to a node.  Its id is (gen << 24) | index.
 * refs counts what the peer holds, pending what messages in flight carry to it; the slot
 * is freed when both reach 0.  Guarded by the node owner's lock. */
struct b1_handle {
    uint64_t peer_id;
    uint32_t peer_slot;
    uint32_t node;
    uint32_t node_gen;
    uint32_t gen;
    uint32_t refs;
    uint32_t pending;
    uint32_t next_holder;
    _Atomic uint32_t dead;   /* the peer has read NODE_DESTROY for it */
    _Atomic uint32_t next_free;
    uint32_t charger;        /* the share of its peer's quota_handles it is charged to
                                (queue.h b1_charge_handle), set when it is made */
};
#define B1_HANDLE_INDEX_BITS 24
#define B1_HANDLE_INDEX_MASK ((1u << B1_HANDLE_INDEX_BITS) - 1)

/* the timestamp of an entry that left the queue as a slice (on its peer's `held` list) */
#define B1_TS_HELD UINT64_MAX

/* A queue entry: one destination's copy of a message, in that destination's tree.
 * Sorted by (ts, sender, seq, idx), the same tie-break at every queue. */
struct b1_entry {
    uint64_t ts;          /* odd: a block (staged); even: committed */
    uint64_t sender;
    uint64_t seq;
    uint32_t idx;
    union {
        uint32_t prio;              /* treap priority while queued, a hash of the identity */
        _Atomic uint32_t next_free; /* free-stack link while free */
    };
    uint32_t left, right;
    uint32_t msg;         /* message record, in pool units (64 bytes) from the pool start */
    uint16_t type;        /* B1_MSG_*, | B1_ENTRY_RECEIVING when claimed; B1_ENTRY_FREE */
    uint16_t queue;       /* the peer slot whose queue or held list owns it, 0 when none:
                             set before it is linked, and cleared only when the entry passes
                             to its next owner (claimed, or back to its transaction) in the
                             same lock hold -- so a holder killed between an unlink and that
                             hand-over leaves it to the queue, and a takeover relinks it
                             (queue.c) */
    uint64_t destination; /* the receiver's handle id for the node */
    uint32_t node;
    uint32_t node_gen;
};
/* Who owns an entry, and so who releases it:
 *   - in a queue (or on a peer's held list as a slice): that peer, under its lock;
 *   - prepared and not yet staged (ts 0, msg set), or unlinked from a gone queue before
 *     its transaction's next step: the transaction, i.e. its record's stager;
 *   - claimed (type marked B1_ENTRY_RECEIVING): the process whose owner token is
 *     (right << 32) | left, set in the same lock hold that unlinked it;
 *   - free: type B1_ENTRY_FREE and msg 0, on the free stack.
 * The reference to the record is released by exchanging msg to 0 first: only the party
 * whose exchange saw it puts the record, so a kill between the two stores leaks at most
 * that reference (gc's pool sweep finds it), never puts it twice.  b1_gc frees the
 * entries of dead owners (reap.c). */
#define B1_ENTRY_RECEIVING 0x100u
#define B1_ENTRY_FREE 0xffffu
static inline uint64_t entry_owner(const struct b1_entry *e) {
    return ((uint64_t)e->right << 32) | e->left;
}
/* one cache line per entry (the table is 64-aligned): a message moves two lines between
 * the sender's and the receiver's CPU, its entry and its record's head */
_Static_assert(sizeof(struct b1_entry) == 64, "an entry fills one cache line");

/* A message record in the pool, shared by all destinations (refcounted).  refs is 0
 * exactly while the record is free (its free-stack link is next_free, a word of its
 * own): a put that finds 0 is refused (b1_bad, EBADMSG), never applied.  stager is the
 * process whose transaction made it; a record with more references than entries naming
 * it lost one to a holder killed between its exchange and its put, and gc on a bus held
 * alone gives it back (rebuild.c).
 *   [b1_msg | payload, padded to 8 | b1_carried x n_handles | u64 x n_dests x n_handles]
 * the last array holds, per destination, the receiver's handle id for each carried node
 * (B1_HANDLE_INVALID when the node was already destroyed at the send). */
struct b1_msg {
    _Atomic uint32_t refs;
    uint32_t len;
    uint32_t n_handles;
    uint16_t size_class;
    uint16_t type;
    uint32_t n_dests;
    _Atomic uint32_t next_free; /* free-stack link while free */
    uint64_t ts;          /* the commit timestamp once stamped: reaping completes the rest */
    _Atomic uint64_t stager; /* owner token of the transaction's process: reaping removes
                                the blocks of a dead one that had not stamped */
    _Atomic uint32_t carved; /* B1_MSG_CARVED ^ unit once its header is written: a walk of
                                the pool (fsck, rebuild.c) stops at a record cut short
                                while it was carved, instead of misreading what follows */
    uint32_t n_fds;       /* descriptors the message carries (fds.c), at most B1_MAX_FDS */
    uint32_t flags;       /* B1_SEND_REQUEST, or 0 */
    uint32_t tag;         /* the sender's b1_frame.tag: matches a reply to its call */
};
#define B1_MSG_CARVED 0x62316d73u
_Static_assert(sizeof(struct b1_msg) <= (1u << B1_POOL_MIN_SHIFT), "a record's header fits one unit");
struct b1_carried {
    uint32_t node;
    uint32_t node_gen;
};
static inline char *msg_payload(struct b1_msg *m) { return (char *)(m + 1); }
static inline uint64_t msg_record_size(uint32_t len, uint32_t n_dests, uint32_t n_handles) {
    return sizeof(struct b1_msg) + (((uint64_t)len + 7u) & ~(uint64_t)7u) +
           (uint64_t)n_handles * sizeof(struct b1_carried) +
           (uint64_t)n_dests * n_handles * sizeof(uint64_t);
}

/* a spin-wait hint to the CPU (lock back-off, the receiver's poll of its front) */
static inline void b1_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The name table (names.c): open addressing with linear probing over names_slots slots
 * (a power of two, at least twice max_names, so a probe meets an empty slot soon).
 * Guarded by its own robust mutex, never held together with a peer lock.
 * Every change is one decisive store of a slot's state, so a kill leaves the table
 * valid: a slot is written while EMPTY or TOMB and made USED last; a name is removed by
 * USED -> TOMB; a TOMB whose next slot is EMPTY becomes EMPTY (no probe passes it).
 * Probe invariant: every USED slot is reached from its home slot (hash & mask) over
 * slots none of which is EMPTY.  Compaction moves a name nearer its home by a copy made
 * USED before the original is removed: a kill between the two leaves the name twice,
 * and the takeover keeps the first on its probe path. */
enum { B1_NAME_EMPTY = 0, B1_NAME_USED = 1, B1_NAME_TOMB = 2 };
struct b1_names_head {
    pthread_mutex_t lock;
    uint32_t used;         /* USED slots (guarded by lock; recounted at a takeover) */
    uint32_t lock_recoveries;
    uint64_t next_seq;     /* stamps each publish, so a slot reused meanwhile is told apart */
    uint32_t tombs;        /* TOMB slots (guarded by lock; recounted at a takeover): past a
                              quarter of the slots the table is compacted (names.c) */
} __attribute__((aligned(64)));
struct b1_name {
    _Atomic uint32_t state;  /* B1_NAME_* */
    uint32_t hash;           /* of the name's bytes (names.c name_hash) */
    uint32_t node, node_gen; /* the named node: its liveness is the node's (names.c) */
    uint64_t owner_id;       /* the node's owner when published */
    uint64_t seq;
    uint32_t owner_slot;
    uint16_t len;
    uint16_t pad;
    char name[B1_NAME_MAX + 1];
} __attribute__((aligned(8)));
/* slots of the name table: the power of two at least 2 * max_names (0 for none) */
static inline uint32_t b1_names_slots(const struct b1_limits *l) {
    uint32_t n = 0;
    if (l->max_names) for (n = 2; n < 2 * l->max_names; n <<= 1) {}
    return n;
}

/* ---- bounds: every index and offset read from the segment is checked ----
 * A process that scribbles over the segment must not crash the others.  Each accessor
 * below checks its index against the table's size (the header is validated once, at
 * attach, against the layout its limits imply); an index out of range is redirected to
 * the table's slot 0, which is never used, and sets b1_bad.  Every call from Python is
 * wrapped (csrc/bus/guard.h) to return -EBADMSG when b1_bad was set during it.  Walks over
 * links in the segment (trees, lists) are bounded by the table's size the same way, so a
 * cycle cannot hang a call either.  What this cannot catch is a scribbled mutex word: a
 * lock that looks held by someone else is waited for, like a live holder's. */
extern __thread int b1_bad __attribute__((tls_model("initial-exec")));

static inline uint32_t b1_in_range(uint32_t i, uint32_t max) {
    if (__builtin_expect(i > max, 0)) {
        b1_bad = 1;
        return 0;
    }
    return i;
}

/* a table's bump pointer, bounded by its size: the indices below it were ever carved */
static inline uint32_t b1_bounded(_Atomic uint32_t *bump, uint32_t max) {
    uint32_t b = atomic_load(bump);
    return b > max + 1 ? max + 1 : b;
}

/* one more step of a walk over segment links; 0 (and b1_bad) past `max` steps */
static inline int b1_step(uint32_t *steps, uint32_t max) {
    if (__builtin_expect(++*steps > max + 1, 0)) {
        b1_bad = 1;
        return 0;
    }
    return 1;
}

static inline struct b1_header *HDR(void *base) { return (struct b1_header *)base; }

/* This process's validated copy of the layout (view.c): the tables' offsets and the
 * limits, fixed at attach.  Accessors and bounds read only this, never the header again. */
struct b1_view {
    void *base;
    uint64_t off_peers, off_nodes, off_handles, off_entries, off_pool;
    struct b1_limits limits;
    uint64_t off_names;
    uint32_t names_slots;  /* b1_names_slots(limits) */
    uint64_t nonce[2];     /* the header's, copied at attach */
};
/* the view last found, shared by the process's threads (views never change or go away,
 * so a stale one only misses the base compare); hidden: one PC-relative load */
extern const struct b1_view *b1_last_view __attribute__((visibility("hidden")));
const struct b1_view *b1_view_find(void *base);
/* validate the header of a mapping of `size` bytes and make its view this process's (the
 * newest for base): 0, -EBADMSG or -EPROTO (b1_attach, b1_init) */
int b1_view_register(void *base, uint64_t size);
static inline const struct b1_view *VIEW(void *base) {
    const struct b1_view *v = __atomic_load_n(&b1_last_view, __ATOMIC_ACQUIRE);
    if (__builtin_expect(v->base == base, 1)) return v; /* never NULL: view.c */
    return b1_view_find(base);
}
#define LIM(base) (VIEW(base)->limits)

static inline struct b1_peer *PEER(void *base, uint32_t i) {
    const struct b1_view *v = VIEW(base);
    return (struct b1_peer *)((char *)base + v->off_peers) + b1_in_range(i, v->limits.max_peers);
}
static inline struct b1_node *NODE(void *base, uint32_t i) {
    const struct b1_view *v = VIEW(base);
    return (struct b1_node *)((char *)base + v->off_nodes) + b1_in_range(i, v->limits.max_nodes);
}
static inline struct b1_handle *HANDLE(void *base, uint32_t i) {
    const struct b1_view *v = VIEW(base);
    return (struct b1_handle *)((char *)base + v->off_handles) + b1_in_range(i, v->limits.max_handles);
}
static inline struct b1_entry *ENTRY_V(const struct b1_view *v, void *base, uint32_t i) {
    return (struct b1_entry *)((char *)base + v->off_entries) + b1_in_range(i, v->limits.max_entries);
}
static inline struct b1_entry *ENTRY(void *base, uint32_t i) { return ENTRY_V(VIEW(base), base, i); }
/* a record's header lies inside the pool; b1_msg_shape checks the rest of it */
static inline struct b1_msg *MSG(void *base, uint32_t unit) {
    const struct b1_view *v = VIEW(base);
    uint64_t last = (v->limits.pool_size - sizeof(struct b1_msg)) >> B1_POOL_MIN_SHIFT;
    if (__builtin_expect(unit > last, 0)) {
        b1_bad = 1;
        unit = 0;
    }
    return (struct b1_msg *)((char *)base + v->off_pool + ((uint64_t)unit << B1_POOL_MIN_SHIFT));
}

static inline struct b1_names_head *NAMES(void *base) {
    return (struct b1_names_head *)((char *)base + VIEW(base)->off_names);
}
/* slot i of the name table; i >= names_slots reads slot 0 and sets b1_bad (a table of no
 * slots has none to read: callers check names_slots first) */
static inline struct b1_name *NAME(void *base, uint32_t i) {
    const struct b1_view *v = VIEW(base);
    if (__builtin_expect(i >= v->names_slots, 0)) {
        b1_bad = 1;
        i = 0;
    }
    return (struct b1_name *)((char *)base + v->off_names + sizeof(struct b1_names_head)) + i;
}

/* A record's shape, read from the segment once and checked (b1_msg_shape): every later
 * use of a length, a count or an array offset reads this copy, never the record again,
 * so a scribbler who changes the record after the check cannot move a copy or an index
 * out of bounds. */
struct b1_shape {
    uint32_t len, n_handles, n_dests, n_fds;
};
static inline struct b1_carried *shape_carried(struct b1_msg *m, const struct b1_shape *s) {
    return (struct b1_carried *)(msg_payload(m) + (((uint64_t)s->len + 7u) & ~(uint64_t)7u));
}
/* the receivers' handle ids of destination j (j < s->n_dests) */
static inline uint64_t *shape_ids(struct b1_msg *m, const struct b1_shape *s, uint32_t j) {
    return (uint64_t *)(shape_carried(m, s) + s->n_handles) + (uint64_t)j * s->n_handles;
}

/* Does record `unit` fit its size class inside the pool, is it live (refs) and is `idx`
 * one of its destinations?  Fills *out with the shape it checked; sets b1_bad when not.
 * Checked before a record read from an entry is used (its payload copied, its handle
 * arrays indexed). */
static inline __attribute__((always_inline)) int b1_msg_shape(void *base, uint32_t unit, uint32_t idx, struct b1_shape *out) {
    const struct b1_view *v = VIEW(base);
    uint64_t at = (uint64_t)unit << B1_POOL_MIN_SHIFT;
    /* the whole header inside the pool, else unit 0 (never a record) and b1_bad */
    if (__builtin_expect(!unit || at + sizeof(struct b1_msg) > v->limits.pool_size, 0)) at = 0;
    struct b1_msg *m = (struct b1_msg *)((char *)base + v->off_pool + at);
    struct b1_shape s = {__atomic_load_n(&m->len, __ATOMIC_RELAXED),
                         __atomic_load_n(&m->n_handles, __ATOMIC_RELAXED),
                         __atomic_load_n(&m->n_dests, __ATOMIC_RELAXED),
                         __atomic_load_n(&m->n_fds, __ATOMIC_RELAXED)};
    uint32_t cls = __atomic_load_n(&m->size_class, __ATOMIC_RELAXED);
    int ok = at && cls < B1_POOL_CLASSES && at + B1_CLASS_BYTES(cls) <= v->limits.pool_size &&
             s.len <= v->limits.max_payload && s.n_handles <= v->limits.max_msg_handles &&
             idx < s.n_dests && s.n_fds <= B1_MAX_FDS && atomic_load_explicit(&m->refs, memory_order_relaxed) != 0 &&
             msg_record_size(s.len, s.n_dests, s.n_handles) <= B1_CLASS_BYTES(cls);
    if (__builtin_expect(!ok, 0)) {
        b1_bad = 1;
        s = (struct b1_shape){0, 0, 0, 0};
    }
    if (out) *out = s;
    return ok;
}

static inline int b1_msg_ok(void *base, uint32_t unit, uint32_t idx) {
    return b1_msg_shape(base, unit, idx, NULL);
}

#endif
