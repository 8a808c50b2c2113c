/* gp_conv: a conversation on a gp_seq (include/gplan/text.h): the messages, each turn continuing
 * the cache, the oldest turns dropped when the context is full. */
#include <stdlib.h>
#include <string.h>

#include "text/lm_impl.h"

struct gp_conv {
    gp_seq *s;
    gp_msg *msgs; /* [n], every content owned */
    size_t n, cap, dropped;
    int sys;      /* msgs[0] is the system message */
};

static char *copy(const char *p, size_t n)
{
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, p, n);
        c[n] = '\0';
    }
    return c;
}

static int push(gp_conv *c, const char *role, const char *text, size_t n)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        gp_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (!m)
            return -1;
        c->msgs = m;
        c->cap = cap;
    }
    char *content = copy(text, n);
    if (!content)
        return -1;
    c->msgs[c->n++] = (gp_msg){role, content};
    return 0;
}

/* Drops messages [at, at + k). */
static void drop(gp_conv *c, size_t at, size_t k)
{
    if (!k) /* nothing, maybe no array yet: memmove takes no NULL */
        return;
    for (size_t i = at; i < at + k; i++)
        free((char *)c->msgs[i].content);
    memmove(c->msgs + at, c->msgs + at + k, (c->n - at - k) * sizeof *c->msgs);
    c->n -= k;
}

gp_conv *gp_conv_new(gp_seq *s, const char *system, char *err, size_t err_len)
{
    /* Refused now rather than at the first turn: a chat program says so before reading input. */
    if (gp_lm_chat_apply(gp_seq_lm(s), NULL, 0, 0, NULL, 0, err, err_len) < 0)
        return NULL;
    if (!gp_lm_context(gp_seq_lm(s))) {
        snprintf(err, err_len, "a chat needs a plan with a KV cache (an attention context)");
        return NULL;
    }
    gp_conv *c = calloc(1, sizeof *c);
    if (!c || (system && push(c, "system", system, strlen(system)))) {
        gp_conv_free(c);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    c->s = s;
    c->sys = system != NULL;
    return c;
}

void gp_conv_free(gp_conv *c)
{
    if (!c)
        return;
    drop(c, 0, c->n);
    free(c->msgs);
    free(c);
}

int gp_conv_start(gp_conv *c, const char *text, size_t len, const gp_gen_opts *g)
{
    c->dropped = 0;
    int64_t bad = gp_utf8_invalid_at(text, len);
    if (bad >= 0)
        return gp_seq_fail(c->s, "invalid UTF-8 at byte %lld", (long long)bad);
    if (push(c, "user", text, len))
        return gp_seq_fail(c->s, "out of memory");
    int rc = gp_seq_start_chat(c->s, c->msgs, c->n, g);
    /* Full: drop the oldest user turn and its reply until the rest fits. */
    while (rc == GP_SEQ_TOO_LONG && c->n > (size_t)c->sys + 1) {
        size_t k = c->n - c->sys - 1 >= 2 ? 2 : 1;
        drop(c, (size_t)c->sys, k);
        c->dropped += k;
        gp_seq_reset(c->s);
        rc = gp_seq_start_chat(c->s, c->msgs, c->n, g);
    }
    if (rc)
        drop(c, c->n - 1, 1);
    return rc;
}

int gp_conv_end(gp_conv *c)
{
    size_t n;
    const char *reply = gp_seq_reply(c->s, &n);
    return push(c, "assistant", reply, n) ? gp_seq_fail(c->s, "out of memory") : 0;
}

int gp_conv_turn(gp_conv *c, const char *text, size_t len, const gp_gen_opts *g,
                 gp_gen_result *r)
{
    int rc = gp_conv_start(c, text, len, g), f = 0;
    if (!rc)
        while ((f = gp_seq_step(c->s)) == GP_FINISH_NONE)
            ;
    if (r)
        gp_seq_result(c->s, r);
    return rc ? rc : f < 0 ? -1 : gp_conv_end(c);
}

const gp_msg *gp_conv_messages(const gp_conv *c, size_t *n)
{
    *n = c->n;
    return c->msgs;
}

size_t gp_conv_dropped(const gp_conv *c) { return c->dropped; }
