/* machine.c - the registry of C machines and the step buffers they write into.
 *
 * A protocol's machine is linked in when its file defines `sim_<name>_ops`; the registry
 * refers to each by a weak reference, so a protocol without a C twin is simply absent
 * (bus1py.sim then runs it on the Python machines).
 */
#include "machine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define SIM_PROTOCOL(x) extern const struct sim_ops sim_##x##_ops __attribute__((weak));
SIM_PROTOCOL(fifo) SIM_PROTOCOL(bss) SIM_PROTOCOL(ses) SIM_PROTOCOL(rst) SIM_PROTOCOL(prs)
SIM_PROTOCOL(ks) SIM_PROTOCOL(jpcy) SIM_PROTOCOL(buffer) SIM_PROTOCOL(bus1)
#undef SIM_PROTOCOL

/* bus1py.causal.PROTOCOLS order */
static const struct sim_ops *registry(size_t i)
{
    const struct sim_ops *all[] = {&sim_fifo_ops, &sim_bss_ops, &sim_ses_ops, &sim_rst_ops,
                                   &sim_prs_ops, &sim_ks_ops, &sim_jpcy_ops, &sim_buffer_ops,
                                   &sim_bus1_ops};
    return i < sizeof all / sizeof all[0] ? all[i] : (const struct sim_ops *)-1;
}

static const struct sim_ops *lookup(const char *name)
{
    const struct sim_ops *ops;
    for (size_t i = 0; (ops = registry(i)) != (const struct sim_ops *)-1; i++)
        if (ops && strcmp(ops->name, name) == 0)
            return ops;
    return NULL;
}

const char *sim_protocols(void)
{
    static char names[256];
    const struct sim_ops *ops;
    size_t at = 0;
    names[0] = 0;
    for (size_t i = 0; (ops = registry(i)) != (const struct sim_ops *)-1; i++)
        if (ops)
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", at ? "," : "",
                                   ops->name);
    return names;
}

int sim_multicast_kind(const char *name)
{
    const struct sim_ops *ops = lookup(name);
    return ops ? ops->multicast : -1;
}

struct sim_machine *sim_machine_new(const char *name, int me, int n)
{
    const struct sim_ops *ops = lookup(name);
    if (!ops || n < 2 || n > 0xFFFF || me < 0 || me >= n)
        return NULL;
    struct sim_machine *m = calloc(1, ops->size);
    if (!m)
        return NULL;
    m->ops = ops;
    m->me = me;
    m->n = n;
    if (ops->init(m) < 0) {
        sim_machine_free(m);
        return NULL;
    }
    return m;
}

void sim_machine_free(struct sim_machine *m)
{
    if (!m)
        return;
    if (m->ops->fini)
        m->ops->fini(m);
    free(m);
}

int sim_send(struct sim_machine *m, const uint16_t *dests, int k, const uint8_t *payload,
             size_t len, struct sim_step *step)
{
    return m->ops->send(m, dests, k, payload, len, step);
}

int sim_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                struct sim_step *step)
{
    return m->ops->receive(m, src, data, len, step);
}

long sim_held(struct sim_machine *m)
{
    return m->ops->held ? m->ops->held(m) : 0;
}

void sim_step_init(struct sim_step *s)
{
    memset(s, 0, sizeof *s);
}

void sim_step_reset(struct sim_step *s)
{
    s->nwires = s->ndeliv = s->dlen = 0;
    s->err[0] = 0;
}

void sim_step_free(struct sim_step *s)
{
    free(s->wires);
    free(s->deliv);
    free(s->dbytes);
    sim_step_init(s);
}

void sim_wire_free(uint8_t *bytes)
{
    free(bytes);
}

int sim_reserve(void **arr, size_t *cap, size_t count, size_t more, size_t size)
{
    if (count + more <= *cap)
        return 0;
    size_t want = *cap ? *cap * 2 : 16;
    while (want < count + more)
        want *= 2;
    void *p = realloc(*arr, want * size);
    if (!p)
        return -1;
    *arr = p;
    *cap = want;
    return 0;
}

int sim_fail(struct sim_step *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

uint8_t *sim_emit(struct sim_step *s, uint32_t dest, uint32_t len, struct sim_cost cost)
{
    if (sim_reserve((void **)&s->wires, &s->wcap, s->nwires, 1, sizeof *s->wires) < 0) {
        sim_fail(s, "out of memory");
        return NULL;
    }
    uint8_t *bytes = malloc(len ? len : 1);
    if (!bytes) {
        sim_fail(s, "out of memory");
        return NULL;
    }
    s->wires[s->nwires++] = (struct sim_wire){dest, len, bytes, cost};
    return bytes;
}

int sim_deliver(struct sim_step *s, uint32_t sender, const uint8_t *payload, uint32_t len)
{
    if (sim_reserve((void **)&s->deliv, &s->dcap, s->ndeliv, 1, sizeof *s->deliv) < 0 ||
        sim_reserve((void **)&s->dbytes, &s->dbcap, s->dlen, len, 1) < 0)
        return sim_fail(s, "out of memory");
    if (len)
        memcpy(s->dbytes + s->dlen, payload, len);
    s->deliv[s->ndeliv++] = (struct sim_delivery){sender, (uint32_t)s->dlen, len};
    s->dlen += len;
    return 0;
}
