/* The built-in chat formats of tokenizer/chat.h: each family's layout written as its reference
 * template (named above each writer) renders it, and recognition by the template's markers. */
#include "tokenizer/chat.h"

#include <stdio.h>
#include <string.h>

static const char *const names[GP_CHAT_COUNT] = {"chatml", "llama3", "llama2",
                                                 "gemma",  "phi3",   "mistral"};

const char *gp_chat_format_name(gp_chat_format f)
{
    return f >= 0 && f < GP_CHAT_COUNT ? names[f] : "?";
}

const char *gp_chat_format_list(void)
{
    return "chatml, llama3, llama2, gemma, phi3, mistral";
}

int gp_chat_format_parse(const char *name, gp_chat_format *out)
{
    for (int f = 0; f < GP_CHAT_COUNT; f++)
        if (!strcmp(name, names[f])) {
            *out = (gp_chat_format)f;
            return 0;
        }
    return -1;
}

gp_chat_template gp_chat_builtin(gp_chat_format f)
{
    gp_chat_template t = {f, f != GP_CHAT_CHATML && f != GP_CHAT_PHI3, NULL, 0};
    return t;
}

/* ---- recognition ---- */

/* A ChatML template's own system prompt: a literal "<|im_start|>system\n TEXT <|im_end|>" in a
 * template that writes it only when the first message is not a system one (SmolLM2, Qwen2). TEXT
 * must be plain (no quote, brace or escape), since it is used as it stands in the template. */
static void chatml_default_system(const char *tmpl, gp_chat_template *t)
{
    if (!strstr(tmpl, "!= 'system'") && !strstr(tmpl, "!= \"system\""))
        return;
    static const char head[] = "<|im_start|>system";
    for (const char *p = strstr(tmpl, head); p; p = strstr(p + 1, head)) {
        const char *q = p + sizeof head - 1;
        if (*q == '\n')
            q++;
        else if (q[0] == '\\' && q[1] == 'n')
            q += 2;
        else
            continue;
        const char *end = strstr(q, "<|im_end|>");
        if (!end || end == q)
            continue;
        size_t n = (size_t)(end - q);
        if (strcspn(q, "'\"{}\\") < n)
            continue;
        t->default_system = q;
        t->default_system_len = n;
        return;
    }
}

int gp_chat_detect(const char *tmpl, gp_chat_template *out, char *err, size_t err_len)
{
    gp_chat_format f;
    if (strstr(tmpl, "<|im_start|>"))
        f = GP_CHAT_CHATML;
    else if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|end_header_id|>"))
        f = GP_CHAT_LLAMA3;
    else if (strstr(tmpl, "<start_of_turn>"))
        f = GP_CHAT_GEMMA;
    else if (strstr(tmpl, "<|user|>") && strstr(tmpl, "<|end|>"))
        f = GP_CHAT_PHI3;
    else if (strstr(tmpl, "[INST]"))
        f = strstr(tmpl, "<<SYS>>") ? GP_CHAT_LLAMA2 : GP_CHAT_MISTRAL;
    else {
        snprintf(err, err_len,
                 "unknown chat template (none of the markers of %s): choose one with "
                 "--chat-format NAME",
                 gp_chat_format_list());
        return -1;
    }
    *out = gp_chat_builtin(f);
    out->add_bos = strstr(tmpl, "bos_token") != NULL;
    if (f == GP_CHAT_CHATML)
        chatml_default_system(tmpl, out);
    return 0;
}

/* ---- formatting ---- */

typedef struct {
    char *out;
    size_t cap, len; /* like snprintf: at most cap - 1 bytes and the NUL */
} writer;

static void put_n(writer *w, const char *s, size_t n)
{
    if (w->cap && w->len < w->cap - 1) {
        size_t room = w->cap - 1 - w->len;
        memcpy(w->out + w->len, s, n < room ? n : room);
    }
    w->len += n;
}

static void put(writer *w, const char *s)
{
    put_n(w, s, strlen(s));
}

/* Python's str.strip() (Jinja's trim) over ASCII whitespace: *s and *n narrowed. */
static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void put_stripped(writer *w, const char *s)
{
    size_t n = strlen(s);
    while (n && is_space(*s))
        s++, n--;
    while (n && is_space(s[n - 1]))
        n--;
    put_n(w, s, n);
}

enum { R_SYSTEM, R_USER, R_ASSISTANT };

static int role_of(const char *role)
{
    return !strcmp(role, "system") ? R_SYSTEM
           : !strcmp(role, "user") ? R_USER
           : !strcmp(role, "assistant") ? R_ASSISTANT
                                        : -1;
}

/* The families that take a system message only first and then user and assistant in turn. */
static int check_turns(const gp_chat_template *t, const gp_chat_msg *m, size_t n, char *err,
                       size_t err_len)
{
    for (size_t i = 0; i < n; i++)
        if (role_of(m[i].role) < 0) {
            snprintf(err, err_len, "chat: role \"%s\" of message %zu is not system, user or "
                     "assistant", m[i].role, i);
            return -1;
        }
    if (t->format == GP_CHAT_CHATML || t->format == GP_CHAT_LLAMA3 || t->format == GP_CHAT_PHI3)
        return 0;
    size_t first = n && role_of(m[0].role) == R_SYSTEM;
    for (size_t i = first; i < n; i++)
        if (role_of(m[i].role) != ((i - first) % 2 ? R_ASSISTANT : R_USER)) {
            snprintf(err, err_len, "chat: %s takes an optional system message first, then user "
                     "and assistant messages in turn (message %zu is %s)",
                     gp_chat_format_name(t->format), i, m[i].role);
            return -1;
        }
    return 0;
}

/* Every message as PRE role MID content END, the content trimmed when strip is set, then prompt
 * when gen is set: the layout of the families that write each role's name (ChatML, Llama 3, Phi-3). */
static void turns(writer *w, const gp_chat_msg *m, size_t n, const char *pre, const char *mid,
                  const char *end, int strip, int gen, const char *prompt)
{
    for (size_t i = 0; i < n; i++) {
        put(w, pre);
        put(w, m[i].role);
        put(w, mid);
        if (strip)
            put_stripped(w, m[i].content);
        else
            put(w, m[i].content);
        put(w, end);
    }
    if (gen)
        put(w, prompt);
}

/* ChatML (SmolLM2-Instruct, Qwen2): the template's default system prompt when the first message
 * is not a system one. */
static void chatml(writer *w, const gp_chat_template *t, const gp_chat_msg *m, size_t n, int gen)
{
    if (t->default_system && (n == 0 || role_of(m[0].role) != R_SYSTEM) && n > 0) {
        put(w, "<|im_start|>system\n");
        put_n(w, t->default_system, t->default_system_len);
        put(w, "<|im_end|>\n");
    }
    turns(w, m, n, "<|im_start|>", "\n", "<|im_end|>\n", 0, gen, "<|im_start|>assistant\n");
}

/* Llama 3 (Meta-Llama-3-8B-Instruct): contents trimmed. */
static void llama3(writer *w, const gp_chat_msg *m, size_t n, int gen)
{
    turns(w, m, n, "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", 1, gen,
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 2 (Llama-2-7b-chat-hf): BOS before every [INST]; the system block inside the first user
 * message, which is then stripped as a whole; assistant replies stripped between spaces, then EOS.
 * No generation prompt: the model answers after [/INST]. */
static void llama2(writer *w, const gp_chat_template *t, const gp_chat_msg *m, size_t n,
                   const char *bos, const char *eos)
{
    const char *sys = n && role_of(m[0].role) == R_SYSTEM ? m[0].content : NULL;
    for (size_t i = sys != NULL; i < n; i++) {
        if (role_of(m[i].role) == R_ASSISTANT) {
            put(w, " ");
            put_stripped(w, m[i].content);
            put(w, " ");
            put(w, eos);
            continue;
        }
        if (t->add_bos)
            put(w, bos);
        put(w, "[INST] ");
        if (sys && i == 1) {
            /* strip("<<SYS>>\n" + sys + "\n<</SYS>>\n\n" + content): its start is '<'. */
            const char *c = m[i].content;
            while (*c && is_space(*c))
                c++;
            put(w, "<<SYS>>\n");
            put(w, sys);
            if (*c) {
                put(w, "\n<</SYS>>\n\n");
                put_stripped(w, m[i].content);
            } else {
                put(w, "\n<</SYS>>");
            }
        } else {
            put_stripped(w, m[i].content);
        }
        put(w, " [/INST]");
    }
}

/* Gemma (gemma-2-2b-it): the assistant is "model", contents trimmed. Gemma's own templates refuse
 * a system message; as Gemma 3's does, it goes before the first user message with a blank line. */
static void gemma(writer *w, const gp_chat_msg *m, size_t n, int gen)
{
    const char *sys = n && role_of(m[0].role) == R_SYSTEM ? m[0].content : NULL;
    for (size_t i = sys != NULL; i < n; i++) {
        int user = role_of(m[i].role) == R_USER;
        put(w, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (sys && i == 1) {
            put(w, sys);
            put(w, "\n\n");
        }
        put_stripped(w, m[i].content);
        put(w, "<end_of_turn>\n");
    }
    if (gen)
        put(w, "<start_of_turn>model\n");
}

/* Phi-3 (Phi-3-mini-4k-instruct): <|role|>\n content <|end|>\n. */
static void phi3(writer *w, const gp_chat_msg *m, size_t n, int gen)
{
    turns(w, m, n, "<|", "|>\n", "<|end|>\n", 0, gen, "<|assistant|>\n");
}

/* Mistral (Mistral-7B-Instruct-v0.1 and v0.2's first template): one BOS at the start; a system
 * message goes before the first user message with a blank line (v0.3's way). No generation
 * prompt. */
static void mistral(writer *w, const gp_chat_msg *m, size_t n, const char *eos)
{
    const char *sys = n && role_of(m[0].role) == R_SYSTEM ? m[0].content : NULL;
    for (size_t i = sys != NULL; i < n; i++) {
        if (role_of(m[i].role) == R_ASSISTANT) {
            put(w, m[i].content);
            put(w, eos);
            continue;
        }
        put(w, "[INST] ");
        if (sys && i == 1) {
            put(w, sys);
            put(w, "\n\n");
        }
        put(w, m[i].content);
        put(w, " [/INST]");
    }
}

int64_t gp_chat_apply(const gp_chat_template *t, const gp_chat_msg *messages, size_t n,
                      int add_generation_prompt, const char *bos, const char *eos, char *out,
                      size_t cap, char *err, size_t err_len)
{
    static const char *const def_bos[GP_CHAT_COUNT] = {"<|endoftext|>", "<|begin_of_text|>", "<s>",
                                                       "<bos>", "<s>", "<s>"};
    static const char *const def_eos[GP_CHAT_COUNT] = {"<|im_end|>", "<|eot_id|>", "</s>",
                                                       "<eos>", "<|endoftext|>", "</s>"};
    if (t->format < 0 || t->format >= GP_CHAT_COUNT) {
        snprintf(err, err_len, "chat: unknown format %d", (int)t->format);
        return -1;
    }
    if (check_turns(t, messages, n, err, err_len))
        return -1;
    bos = bos ? bos : def_bos[t->format];
    eos = eos ? eos : def_eos[t->format];
    writer w = {out, cap, 0};
    /* Llama 2 writes its BOS before each [INST]; the others once, first. */
    if (t->add_bos && t->format != GP_CHAT_LLAMA2)
        put(&w, bos);
    int gen = add_generation_prompt;
    switch (t->format) {
    case GP_CHAT_CHATML: chatml(&w, t, messages, n, gen); break;
    case GP_CHAT_LLAMA3: llama3(&w, messages, n, gen); break;
    case GP_CHAT_LLAMA2: llama2(&w, t, messages, n, bos, eos); break;
    case GP_CHAT_GEMMA: gemma(&w, messages, n, gen); break;
    case GP_CHAT_PHI3: phi3(&w, messages, n, gen); break;
    default: mistral(&w, messages, n, eos); break;
    }
    if (cap)
        out[w.len < cap ? w.len : cap - 1] = '\0';
    return (int64_t)w.len;
}
