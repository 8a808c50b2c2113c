/* OpenAI request parsing and response formatting (server/api.h), with jansson. Field checks follow
 * OpenAI's documented ranges; unknown fields are ignored, as OpenAI-compatible servers do. */
#include "server/api.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gp_api_error_set(gp_api_error *e, int status, const char *type, const char *code,
                      const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

/* A string of any bytes as JSON: invalid UTF-8 becomes U+FFFD (jansson takes only UTF-8). */
static json_t *str_any(const char *s, size_t n)
{
    if (gp_utf8_invalid_at(s, n) < 0)
        return json_stringn(s, n);
    char *buf = malloc(3 * n + 1);
    if (!buf)
        return json_string("");
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int64_t bad = gp_utf8_invalid_at(s + i, n - i);
        size_t good = bad < 0 ? n - i : (size_t)bad;
        memcpy(buf + o, s + i, good);
        o += good;
        i += good;
        if (i < n) {
            memcpy(buf + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    json_t *j = json_stringn(buf, o);
    free(buf);
    return j;
}

static char *dump(json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

char *gp_api_error_json(const gp_api_error *e)
{
    return dump(json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message",
                          str_any(e->message, strlen(e->message)), "type",
                          e->type ? e->type : "invalid_request_error", "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_null()));
}

/* ---- requests ---- */

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int bad(gp_api_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(gp_api_error *err, const char *param, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gp_api_error_set(err, 400, "invalid_request_error", NULL, param, "%s", msg);
    return -1;
}

/* A field that is absent or null: 0; present: 1; anything else than a number: -1. */
static int get_num(json_t *o, const char *key, double lo, double hi, double *out,
                   gp_api_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return bad(err, key, "'%s' must be a number, not %s", key, type_name(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return bad(err, key, "%g is not a valid value for '%s': it must be in [%g, %g]", d, key,
                   lo, hi);
    *out = d;
    return 1;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                   gp_api_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return bad(err, key, "'%s' must be an integer, not %s", key, type_name(v));
    long long i = json_integer_value(v);
    if (i < lo || i > hi)
        return bad(err, key, "%lld is not a valid value for '%s': it must be in [%lld, %lld]", i,
                   key, lo, hi);
    *out = i;
    return 1;
}

static int get_bool(json_t *o, const char *key, int *out, gp_api_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(err, key, "'%s' must be a boolean, not %s", key, type_name(v));
    *out = json_is_true(v);
    return 1;
}

/* A string with no NUL byte (the text API takes C strings). */
static int plain_string(json_t *v) { return json_is_string(v) && !memchr(json_string_value(v), 0, json_string_length(v)); }

static int parse_messages(gp_api_request *r, json_t *root, gp_api_error *err)
{
    json_t *ms = json_object_get(root, "messages");
    if (!ms || json_is_null(ms))
        return bad(err, "messages", "'messages' is a required property");
    if (!json_is_array(ms))
        return bad(err, "messages", "'messages' must be an array, not %s", type_name(ms));
    size_t n = json_array_size(ms);
    if (!n)
        return bad(err, "messages", "'messages' must hold at least one message");
    r->msgs = calloc(n, sizeof *r->msgs);
    r->parts = calloc(n, sizeof *r->parts);
    if (!r->msgs || !r->parts)
        return bad(err, NULL, "out of memory");
    r->n_msgs = n;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(ms, i), *role = json_object_get(m, "role"), *c;
        char where[64];
        snprintf(where, sizeof where, "messages[%zu]", i);
        if (!json_is_object(m))
            return bad(err, where, "'%s' must be an object, not %s", where, type_name(m));
        snprintf(where, sizeof where, "messages[%zu].role", i);
        if (!role)
            return bad(err, where, "'%s' is a required property", where);
        const char *rs = json_is_string(role) ? json_string_value(role) : NULL;
        if (!rs || (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") &&
                    strcmp(rs, "developer")))
            return bad(err, where, "'%s' must be one of 'system', 'developer', 'user', "
                       "'assistant'", where);
        r->msgs[i].role = !strcmp(rs, "developer") ? "system" : rs;
        snprintf(where, sizeof where, "messages[%zu].content", i);
        c = json_object_get(m, "content");
        if (!c || json_is_null(c)) {
            if (strcmp(rs, "assistant"))
                return bad(err, where, "'%s' is a required property", where);
            r->msgs[i].content = "";
        } else if (plain_string(c)) {
            r->msgs[i].content = json_string_value(c);
        } else if (json_is_array(c)) {
            /* Text parts, joined. */
            size_t total = 0, k;
            json_t *part;
            json_array_foreach(c, k, part) {
                json_t *t = json_object_get(part, "type"), *tx = json_object_get(part, "text");
                if (!json_is_object(part) || !json_is_string(t) ||
                    strcmp(json_string_value(t), "text") || !plain_string(tx))
                    return bad(err, where, "'%s[%zu]' must be a text part {\"type\": \"text\", "
                               "\"text\": ...} (only text is supported)", where, k);
                total += json_string_length(tx);
            }
            char *buf = malloc(total + 1);
            if (!buf)
                return bad(err, NULL, "out of memory");
            r->parts[i] = buf;
            size_t at = 0;
            json_array_foreach(c, k, part) {
                json_t *tx = json_object_get(part, "text");
                memcpy(buf + at, json_string_value(tx), json_string_length(tx));
                at += json_string_length(tx);
            }
            buf[at] = '\0';
            r->msgs[i].content = buf;
        } else {
            return bad(err, where, "'%s' must be a string or an array of text parts, not %s",
                       where, type_name(c));
        }
    }
    return 0;
}

static int parse_prompt(gp_api_request *r, json_t *root, gp_api_error *err)
{
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p))
        return bad(err, "prompt", "'prompt' is a required property");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0); /* a batch of one */
    if (plain_string(p)) {
        r->prompt = json_string_value(p);
        r->prompt_len = json_string_length(p);
        return 0;
    }
    if (!json_is_array(p))
        return bad(err, "prompt", "'prompt' must be a string or an array of token ids, not %s",
                   type_name(p));
    size_t n = json_array_size(p), i;
    json_t *v;
    if (!n)
        return bad(err, "prompt", "'prompt' is empty");
    if (!(r->prompt_ids = malloc(n * sizeof *r->prompt_ids)))
        return bad(err, NULL, "out of memory");
    json_array_foreach(p, i, v) {
        if (json_is_string(v) || json_is_array(v))
            return bad(err, "prompt", "a batch of prompts is not supported: give one prompt");
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return bad(err, "prompt", "'prompt[%zu]' must be a token id (an integer >= 0)", i);
        r->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    r->n_prompt_ids = (int64_t)n;
    return 0;
}

static int parse_stop(gp_api_request *r, json_t *root, gp_api_error *err)
{
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s))
        return 0;
    json_t *one[1] = {s};
    size_t n = json_is_array(s) ? json_array_size(s) : 1;
    if (!json_is_array(s) && !json_is_string(s))
        return bad(err, "stop", "'stop' must be a string or an array of strings, not %s",
                   type_name(s));
    if (n > GP_ENGINE_MAX_STOPS)
        return bad(err, "stop", "'stop' holds %zu strings, more than %d", n, GP_ENGINE_MAX_STOPS);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(s) ? json_array_get(s, i) : one[0];
        if (!plain_string(v))
            return bad(err, "stop", "'stop[%zu]' must be a string", i);
        if (json_string_length(v) > 256)
            return bad(err, "stop", "'stop[%zu]' is longer than 256 bytes", i);
        if (json_string_length(v)) /* an empty stop string stops nothing */
            r->p.stop[r->p.n_stop++] = json_string_value(v);
    }
    return 0;
}

int gp_api_parse(gp_api_request *r, int chat, const char *body, size_t len, gp_api_error *err)
{
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->p.max_tokens = -1;
    r->p.so = gp_sampler_defaults();
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    r->json = root;
    if (!root)
        return bad(err, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                   je.line, je.column);
    if (!json_is_object(root))
        return bad(err, NULL, "the body must be a JSON object, not %s", type_name(root));
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model) && !json_is_string(model))
        return bad(err, "model", "'model' must be a string, not %s", type_name(model));
    r->model = model && json_is_string(model) ? json_string_value(model) : NULL;
    if (chat ? parse_messages(r, root, err) : parse_prompt(r, root, err))
        return -1;
    long long i = 0;
    double d = 0;
    int rc, b = 0;
    if ((rc = get_int(root, "max_tokens", 0, INT32_MAX, &i, err)) < 0)
        return -1;
    if (rc)
        r->p.max_tokens = i;
    if ((rc = get_int(root, "max_completion_tokens", 0, INT32_MAX, &i, err)) < 0)
        return -1;
    if (rc)
        r->p.max_tokens = i;
    if ((rc = get_int(root, "n", 1, 1, &i, err)) < 0) {
        if (json_is_integer(json_object_get(root, "n")))
            return bad(err, "n", "'n' must be 1: one choice a request");
        return -1;
    }
    if ((rc = get_num(root, "temperature", 0, 2, &d, err)) < 0)
        return -1;
    if (rc)
        r->p.so.temp = d;
    if ((rc = get_num(root, "top_p", 0, 1, &d, err)) < 0)
        return -1;
    if (rc)
        r->p.so.top_p = d > 0 ? d : 1e-9; /* 0: only the most likely */
    if ((rc = get_int(root, "top_k", 0, INT32_MAX, &i, err)) < 0)
        return -1;
    if (rc)
        r->p.so.top_k = i;
    if ((rc = get_num(root, "min_p", 0, 1, &d, err)) < 0)
        return -1;
    if (rc)
        r->p.so.min_p = d;
    if ((rc = get_num(root, "repeat_penalty", 1e-9, 1e9, &d, err)) < 0)
        return -1;
    if (rc)
        r->p.so.repeat_penalty = d;
    if (get_num(root, "frequency_penalty", -2, 2, &d, err) < 0 ||
        get_num(root, "presence_penalty", -2, 2, &d, err) < 0)
        return -1; /* accepted, not applied */
    json_t *seed = json_object_get(root, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed))
            return bad(err, "seed", "'seed' must be an integer, not %s", type_name(seed));
        r->p.so.seed = (uint64_t)json_integer_value(seed);
    }
    if (parse_stop(r, root, err) || get_bool(root, "stream", &r->stream, err) < 0 ||
        get_bool(root, "ignore_eos", &r->p.ignore_eos, err) < 0)
        return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return bad(err, "stream_options", "'stream_options' must be an object, not %s",
                       type_name(so));
        if (!r->stream)
            return bad(err, "stream_options", "'stream_options' is only allowed when 'stream' "
                       "is true");
        json_t *u = json_object_get(so, "include_usage");
        if (u && !json_is_null(u) && !json_is_boolean(u))
            return bad(err, "stream_options.include_usage", "'stream_options.include_usage' "
                       "must be a boolean, not %s", type_name(u));
        r->include_usage = json_is_true(u);
    }
    if (chat) {
        if ((rc = get_bool(root, "logprobs", &b, err)) < 0)
            return -1;
        r->p.logprobs = b;
        if ((rc = get_int(root, "top_logprobs", 0, GP_ENGINE_MAX_TOP, &i, err)) < 0)
            return -1;
        if (rc && !b)
            return bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs' true");
        r->p.top_logprobs = rc ? (int)i : 0;
    } else {
        /* Completions: logprobs is the count of alternatives, at most 5. */
        if ((rc = get_int(root, "logprobs", 0, 5, &i, err)) < 0)
            return -1;
        r->p.logprobs = rc;
        r->p.top_logprobs = rc ? (int)i : 0;
        if (get_bool(root, "echo", &b, err) < 0)
            return -1;
        if (b)
            return bad(err, "echo", "'echo' is not supported");
    }
    return 0;
}

void gp_api_request_free(gp_api_request *r)
{
    for (size_t i = 0; r->parts && i < r->n_msgs; i++)
        free(r->parts[i]);
    free(r->parts);
    free(r->msgs);
    free(r->prompt_ids);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

/* ---- responses ---- */

struct gp_api_logprobs {
    int chat;
    json_t *content;                        /* chat: [{token, logprob, bytes, top_logprobs}] */
    json_t *tokens, *token_lp, *top, *off;  /* completions' parallel arrays */
};

gp_api_logprobs *gp_api_logprobs_new(int chat)
{
    gp_api_logprobs *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->chat = chat;
    l->content = json_array();
    l->tokens = json_array();
    l->token_lp = json_array();
    l->top = json_array();
    l->off = json_array();
    return l;
}

void gp_api_logprobs_free(gp_api_logprobs *l)
{
    if (!l)
        return;
    json_decref(l->content);
    json_decref(l->tokens);
    json_decref(l->token_lp);
    json_decref(l->top);
    json_decref(l->off);
    free(l);
}

static json_t *bytes_of(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

void gp_api_logprobs_add(gp_api_logprobs *l, const char *text, size_t len, float logprob,
                         int n_top, const char *const *top_text, const size_t *top_len,
                         const float *top_logprob, size_t text_at)
{
    if (l->chat) {
        json_t *top = json_array();
        for (int i = 0; i < n_top; i++)
            json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token",
                                                 str_any(top_text[i], top_len[i]), "logprob",
                                                 (double)top_logprob[i], "bytes",
                                                 bytes_of(top_text[i], top_len[i])));
        json_array_append_new(l->content,
                              json_pack("{s:o,s:f,s:o,s:o}", "token", str_any(text, len),
                                        "logprob", (double)logprob, "bytes", bytes_of(text, len),
                                        "top_logprobs", top));
        return;
    }
    json_array_append_new(l->tokens, str_any(text, len));
    json_array_append_new(l->token_lp, json_real(logprob));
    json_t *top = json_object();
    for (int i = 0; i < n_top; i++) {
        json_t *k = str_any(top_text[i], top_len[i]);
        json_object_set_new(top, json_string_value(k), json_real(top_logprob[i]));
        json_decref(k);
    }
    json_array_append_new(l->top, top);
    json_array_append_new(l->off, json_integer((json_int_t)text_at));
}

int gp_api_logprobs_count(const gp_api_logprobs *l)
{
    return (int)json_array_size(l->chat ? l->content : l->tokens);
}

/* The logprobs object of a choice (a new reference). */
static json_t *logprobs_json(const gp_api_logprobs *l)
{
    if (!l)
        return json_null();
    if (l->chat)
        return json_pack("{s:O,s:n}", "content", l->content, "refusal");
    return json_pack("{s:O,s:O,s:O,s:O}", "tokens", l->tokens, "token_logprobs", l->token_lp,
                     "top_logprobs", l->top, "text_offset", l->off);
}

/* The logprobs so far as a choice's object, leaving l empty (a stream's next chunk starts over). */
static json_t *logprobs_take(gp_api_logprobs *l)
{
    json_t *j = logprobs_json(l);
    json_t **arrays[] = {&l->content, &l->tokens, &l->token_lp, &l->top, &l->off};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        json_decref(*arrays[i]);
        *arrays[i] = json_array();
    }
    return j;
}

static json_t *usage_json(const gp_api_usage *u)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                     "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens);
}

static json_t *head(const gp_api_meta *m, const char *object)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", m->id, "object", object, "created",
                     (json_int_t)m->created, "model", m->model, "system_fingerprint", "gplan");
}

char *gp_api_response_json(const gp_api_meta *m, const char *text, size_t len, const char *finish,
                           const gp_api_logprobs *logprobs, const gp_api_usage *u)
{
    json_t *r = head(m, m->chat ? "chat.completion" : "text_completion");
    json_t *choice;
    if (m->chat)
        choice = json_pack("{s:i,s:{s:s,s:o,s:n},s:o,s:s}", "index", 0, "message", "role",
                           "assistant", "content", str_any(text, len), "refusal", "logprobs",
                           logprobs_json(logprobs), "finish_reason", finish);
    else
        choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "text", str_any(text, len),
                           "logprobs", logprobs_json(logprobs), "finish_reason", finish);
    json_object_set_new(r, "choices", json_pack("[o]", choice));
    json_object_set_new(r, "usage", usage_json(u));
    return dump(r);
}

static char *sse(json_t *j)
{
    char *body = dump(j);
    if (!body)
        return NULL;
    size_t n = strlen(body);
    char *out = malloc(n + 9);
    if (out)
        memcpy(out, "data: ", 6), memcpy(out + 6, body, n), memcpy(out + 6 + n, "\n\n", 3);
    free(body);
    return out;
}

char *gp_api_chunk_sse(const gp_api_meta *m, int role, const char *text, size_t len,
                       gp_api_logprobs *logprobs, const char *finish, int with_usage)
{
    json_t *r = head(m, m->chat ? "chat.completion.chunk" : "text_completion");
    json_t *lp = logprobs && gp_api_logprobs_count(logprobs) ? logprobs_take(logprobs)
                                                             : json_null();
    json_t *choice;
    if (m->chat) {
        json_t *delta = json_object();
        if (role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (role || len)
            json_object_set_new(delta, "content", str_any(text, len));
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs", lp,
                           "finish_reason", finish ? json_string(finish) : json_null());
    } else {
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "text", str_any(text, len),
                           "logprobs", lp, "finish_reason",
                           finish ? json_string(finish) : json_null());
    }
    json_object_set_new(r, "choices", json_pack("[o]", choice));
    if (with_usage)
        json_object_set_new(r, "usage", json_null());
    return sse(r);
}

char *gp_api_usage_sse(const gp_api_meta *m, const gp_api_usage *u)
{
    json_t *r = head(m, m->chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(r, "choices", json_array());
    json_object_set_new(r, "usage", usage_json(u));
    return sse(r);
}

char *gp_api_models_json(const char *model, long long created)
{
    return dump(json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", model,
                          "object", "model", "created", (json_int_t)created, "owned_by",
                          "gplan"));
}
