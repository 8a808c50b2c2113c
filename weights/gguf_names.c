/* GGUF <-> Hugging Face tensor names (weights/gguf.h): llama.cpp's names for the llama (and qwen2,
 * qwen3: the same names plus qwen3's q and k norms), gpt2, gemma2 / gemma3 and phi3 architectures
 * against the names of the checkpoints they were converted from. */
#include "weights/gguf.h"

#include <stdio.h>
#include <string.h>

/* Name stems without ".weight" / ".bias"; '#' stands for a number (the layer; then an expert's
 * index in llama.cpp's old per-expert Mixtral names), taken in order; '*' is itself, a stacked
 * weight's (weights/weights.h): the merged ffn_*_exps tensors hold every expert. */
typedef struct {
    const char *gguf;
    const char *hf;
} alias;

static const alias llama_names[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
    {"blk.#.attn_norm", "model.layers.#.input_layernorm"},
    {"blk.#.attn_q", "model.layers.#.self_attn.q_proj"},
    {"blk.#.attn_k", "model.layers.#.self_attn.k_proj"},
    {"blk.#.attn_v", "model.layers.#.self_attn.v_proj"},
    {"blk.#.attn_output", "model.layers.#.self_attn.o_proj"},
    {"blk.#.attn_q_norm", "model.layers.#.self_attn.q_norm"}, /* qwen3 */
    {"blk.#.attn_k_norm", "model.layers.#.self_attn.k_norm"},
    {"blk.#.ffn_norm", "model.layers.#.post_attention_layernorm"},
    {"blk.#.ffn_gate", "model.layers.#.mlp.gate_proj"},
    {"blk.#.ffn_up", "model.layers.#.mlp.up_proj"},
    {"blk.#.ffn_down", "model.layers.#.mlp.down_proj"},
    /* Mixtral (arch llama with experts): the router, the merged experts and the older files'
     * experts one by one (w1 gate, w3 up, w2 down) */
    {"blk.#.ffn_gate_inp", "model.layers.#.block_sparse_moe.gate"},
    {"blk.#.ffn_gate_exps", "model.layers.#.block_sparse_moe.experts.*.w1"},
    {"blk.#.ffn_up_exps", "model.layers.#.block_sparse_moe.experts.*.w3"},
    {"blk.#.ffn_down_exps", "model.layers.#.block_sparse_moe.experts.*.w2"},
    {"blk.#.ffn_gate.#", "model.layers.#.block_sparse_moe.experts.#.w1"},
    {"blk.#.ffn_up.#", "model.layers.#.block_sparse_moe.experts.#.w3"},
    {"blk.#.ffn_down.#", "model.layers.#.block_sparse_moe.experts.#.w2"},
};

/* Qwen3-MoE: llama's names (and qwen3's q and k norms) but for the router and the experts. */
static const alias qwen3moe_names[] = {
    {"blk.#.ffn_gate_inp", "model.layers.#.mlp.gate"},
    {"blk.#.ffn_gate_exps", "model.layers.#.mlp.experts.*.gate_proj"},
    {"blk.#.ffn_up_exps", "model.layers.#.mlp.experts.*.up_proj"},
    {"blk.#.ffn_down_exps", "model.layers.#.mlp.experts.*.down_proj"},
};

static const alias gpt2_names[] = {
    {"token_embd", "transformer.wte"},
    {"position_embd", "transformer.wpe"},
    {"output_norm", "transformer.ln_f"},
    {"output", "lm_head"},
    {"blk.#.attn_norm", "transformer.h.#.ln_1"},
    {"blk.#.attn_qkv", "transformer.h.#.attn.c_attn"},
    {"blk.#.attn_output", "transformer.h.#.attn.c_proj"},
    {"blk.#.ffn_norm", "transformer.h.#.ln_2"},
    {"blk.#.ffn_up", "transformer.h.#.mlp.c_fc"},
    {"blk.#.ffn_down", "transformer.h.#.mlp.c_proj"},
};

/* Gemma 2 and 3: llama's names but for the norms, four a block, searched before llama's table: the
 * one after attention is post_attention_norm (llama's ffn_norm is Gemma's
 * pre_feedforward_layernorm). Gemma 2 files have no output tensor (the head is always the
 * embedding); Gemma 3's q and k norms are qwen3's names. */
static const alias gemma_names[] = {
    {"blk.#.post_attention_norm", "model.layers.#.post_attention_layernorm"},
    {"blk.#.ffn_norm", "model.layers.#.pre_feedforward_layernorm"},
    {"blk.#.post_ffw_norm", "model.layers.#.post_feedforward_layernorm"},
};

/* Phi-3: the checkpoint's fused projections keep their layout, qkv_proj as attn_qkv and
 * gate_up_proj (gate rows, then up rows) as ffn_up. */
static const alias phi3_names[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
    {"blk.#.attn_norm", "model.layers.#.input_layernorm"},
    {"blk.#.attn_qkv", "model.layers.#.self_attn.qkv_proj"},
    {"blk.#.attn_output", "model.layers.#.self_attn.o_proj"},
    {"blk.#.ffn_norm", "model.layers.#.post_attention_layernorm"},
    {"blk.#.ffn_up", "model.layers.#.mlp.gate_up_proj"},
    {"blk.#.ffn_down", "model.layers.#.mlp.down_proj"},
};

#define TABLE(t) t, sizeof t / sizeof t[0]
static const struct {
    const char *arch;
    const alias *names;
    size_t count;
    int then_llama; /* names not in this table are looked up in llama's */
} tables[] = {
    {"gpt2", TABLE(gpt2_names), 0},
    {"gemma2", TABLE(gemma_names), 1},
    {"gemma3", TABLE(gemma_names), 1},
    {"phi3", TABLE(phi3_names), 0},
    {"qwen3moe", TABLE(qwen3moe_names), 1},
};

/* The tables of arch, searched in order: its own (and llama's after it where then_llama), or
 * llama's alone (qwen2, qwen3, any other, NULL). Returns how many, 1 or 2. */
static int tables_of(const char *arch, const alias *tab[2], size_t count[2])
{
    int n = 0;
    for (size_t i = 0; arch && i < sizeof tables / sizeof tables[0]; i++)
        if (strcmp(arch, tables[i].arch) == 0) {
            tab[n] = tables[i].names;
            count[n++] = tables[i].count;
            if (!tables[i].then_llama)
                return n;
            break;
        }
    tab[n] = llama_names;
    count[n++] = sizeof llama_names / sizeof llama_names[0];
    return n;
}

/* Length of name's stem when it ends in ".weight" or ".bias", else -1. */
static long stem_len(const char *name)
{
    size_t n = strlen(name);
    if (n > 7 && strcmp(name + n - 7, ".weight") == 0)
        return (long)(n - 7);
    if (n > 5 && strcmp(name + n - 5, ".bias") == 0)
        return (long)(n - 5);
    return -1;
}

#define MAX_NUMS 2 /* numbers in one name: the layer, an expert */

/* Whether stem[len] matches pat; each '#' takes a decimal number without leading zeros (at most 9
 * digits), returned in order in num[k], nlen[k] (*n of them). */
static int match(const char *pat, const char *stem, long len, const char **num, long *nlen, int *n)
{
    long i = 0;
    *n = 0;
    for (; *pat; pat++) {
        if (*pat != '#') {
            if (i >= len || stem[i] != *pat)
                return 0;
            i++;
            continue;
        }
        long start = i;
        while (i < len && stem[i] >= '0' && stem[i] <= '9')
            i++;
        if (i == start || i - start > 9 || (stem[start] == '0' && i - start > 1) ||
            *n == MAX_NUMS)
            return 0;
        num[*n] = stem + start;
        nlen[(*n)++] = i - start;
    }
    return i == len;
}

static int translate(const char *arch, const char *name, int to_hf, char *out, size_t n)
{
    const alias *tabs[2];
    size_t counts[2];
    int n_tabs = tables_of(arch, tabs, counts);
    long len = name ? stem_len(name) : -1;
    if (len < 0 || !out || n == 0)
        return -1;
    for (int t = 0; t < n_tabs; t++)
    for (size_t k = 0; k < counts[t]; k++) {
        const alias *tab = tabs[t];
        const char *num[MAX_NUMS];
        long nlen[MAX_NUMS];
        int nums;
        if (!match(to_hf ? tab[k].gguf : tab[k].hf, name, len, num, nlen, &nums))
            continue;
        /* The numbers into the other name's '#'s, in order. */
        size_t at = 0;
        int used = 0;
        for (const char *to = to_hf ? tab[k].hf : tab[k].gguf; *to; to++) {
            int w = *to == '#' && used < nums
                        ? snprintf(out + at, n - at, "%.*s", (int)nlen[used], num[used])
                        : snprintf(out + at, n - at, "%c", *to);
            used += *to == '#';
            if (w < 0 || (size_t)w >= n - at)
                return -1;
            at += (size_t)w;
        }
        int w = snprintf(out + at, n - at, "%s", name + len);
        return used == nums && w >= 0 && (size_t)w < n - at ? 0 : -1;
    }
    return -1;
}

int gp_gguf_name_to_hf(const char *arch, const char *gguf_name, char *out, size_t n)
{
    return translate(arch, gguf_name, 1, out, n);
}

int gp_gguf_name_from_hf(const char *arch, const char *hf_name, char *out, size_t n)
{
    return translate(arch, hf_name, 0, out, n);
}
