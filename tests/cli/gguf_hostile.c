/* gguf-hostile DIR: writes a tiny llama GGUF model (DIR/hostile-base.gguf: 2 layers, hidden 8, f16
 * matrices, under 4 KB, runs with gplan-run) and one hostile variant of it per catalogue entry
 * (DIR/hostile-NAME.gguf: one key, count, offset, name or byte wrong), and prints a line per
 * variant, "NAME<TAB>CLASS<TAB>TEXT", TEXT the part of the refusal that says what is wrong.
 * tests/cli/hostile.sh runs each through gplan-compile --gguf and gplan-run; the same files are
 * fuzz/corpus/gguf's hostile-*.gguf seeds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/f16.h"
#include "tests/gguf_writer.h"

enum { HIDDEN = 8, LAYERS = 2, N_TENSORS = 3 + 9 * LAYERS };

/* The catalogue: a variant's name, its class and the text its refusal must hold. "meta": a
 * metadata value (gplan-compile --gguf and gplan-run refuse it); "file": the file's structure (so
 * gplan-run also refuses it as the weights of the intact file's plan); "weights": a tensor the
 * graph declares missing or of another shape (gplan-run refuses it, with its own plan or the
 * intact one's). */
static const struct {
    const char *name, *cls, *want;
} variants[] = {
    {"no-block-count", "meta",
     "no llama.block_count: the model's shape cannot come from the graph's defaults"},
    {"no-embedding-length", "meta",
     "no llama.embedding_length: the model's shape cannot come from the"},
    {"no-head-count", "meta",
     "no llama.attention.head_count: the model's shape cannot come from the"},
    {"block-count-1", "meta",
     "9 tensors of the file are not in the graph (blk.1.attn_k.weight, "},
    {"head-count-0", "meta",
     "llama.attention.head_count = 0: must be positive"},
    {"head-count-3", "meta",
     "llama.attention.head_count = 3: does not divide llama.embedding_length = 8"},
    {"head-count-kv-3", "meta",
     "llama.attention.head_count_kv = 3: does not divide llama.attention.head_count = 2"},
    {"ffn-length-0", "meta",
     "llama.feed_forward_length = 0: must be positive"},
    {"block-count-string", "meta",
     "bad GGUF file (llama.block_count is a string, not an integer)"},
    {"eps-nan", "meta",
     "llama.attention.layer_norm_rms_epsilon = nan: not a finite number"},
    {"eps-negative", "meta",
     "llama.attention.layer_norm_rms_epsilon = -1e-05: must be positive"},
    {"theta-nan", "meta",
     "llama.rope.freq_base = nan: not a finite number"},
    {"theta-0", "meta",
     "llama.rope.freq_base = 0: must be positive"},
    {"context-huge", "meta",
     "llama.context_length = 1099511627776: more than a plan can hold (2^24)"},
    {"tensor-count+1", "file",
     "bad GGUF file (tensor info 21: empty name)"},
    {"tensor-count-1", "file",
     "of the padding before the data section is 0x0d, not 0 (more tensor infos than tensor_count "
     "= 20?)"},
    {"data-truncated", "file",
     "tensor \"output.weight\": bytes [2080, 2208) past the end of the data section (2108 bytes)"},
    {"offset-past-end", "file",
     "tensor \"output_norm.weight\": bytes [4096, 4128) past the end of the data section (2208 "
     "bytes)"},
    {"overlap", "file",
     "tensors \"blk.0.attn_q.weight\" [160, 288) and \"blk.0.attn_k.weight\" [160, 288) overlap"},
    {"padding-nonzero", "file",
     "of the padding before the data section is 0x01, not 0"},
    {"alignment-64", "file",
     "tensor \"blk.0.attn_q.weight\": offset 160 is not a multiple of the alignment 64"},
    {"unknown-dtype", "file",
     "tensor \"blk.0.attn_v.weight\": unknown ggml type id 31"},
    {"dims-overflow", "file",
     "tensor \"token_embd.weight\": element count overflows 63 bits"},
    {"duplicate-name", "file",
     "tensor info 4: duplicate name \"blk.0.attn_k.weight\" (also tensor info 3)"},
    {"missing-tensor", "weights",
     "weights: missing tensor \"model.norm.weight\""},
    {"wrong-shape", "weights",
     "weights: \"model.layers.0.self_attn.q_proj.weight\": expected shape [8, 8] f16, file has "
     "[4, 8] f16"},
    {"string-past-end", "file",
     "kv 0 (\"general.architecture\") value at offset 64 needs 1099511627776 bytes, the file has "
     "3808 left"},
    {"kv-count-past-end", "file",
     "kv count 1000 is too large: the 3848 bytes left hold at most 274"},
};

static int is(const char *v, const char *name)
{
    return v && !strcmp(v, name);
}

typedef struct {
    char name[40];
    uint32_t type;
    int64_t ne[2];
    uint32_t ndim;
    unsigned char data[HIDDEN * HIDDEN * 2];
    size_t nbytes;
} tensor;

static void add(tensor *t, int *n, const char *name, int matrix)
{
    tensor *x = &t[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->type = matrix ? 1 : 0; /* f16 matrices, f32 norms, as llama.cpp's converter writes them */
    x->ndim = matrix ? 2 : 1;
    x->ne[0] = HIDDEN, x->ne[1] = matrix ? HIDDEN : 1;
    x->nbytes = matrix ? HIDDEN * HIDDEN * 2 : HIDDEN * 4;
    for (int i = 0; i < HIDDEN * (matrix ? HIDDEN : 1); i++) {
        float v = matrix ? (float)((i * 37 + *n * 11) % 17 - 8) * 0.05f : 1.0f;
        uint16_t h = gp_f32_to_f16(v);
        if (matrix)
            memcpy(x->data + 2 * i, &h, 2);
        else
            memcpy(x->data + 4 * i, &v, 4);
    }
}

/* The base model, or variant v of it. */
static void write_model(gp_gw *w, const char *v)
{
    static tensor t[N_TENSORS];
    static const char *const per_layer[] = {"attn_norm", "attn_q", "attn_k", "attn_v",
                                            "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                                            "ffn_down"};
    int n = 0;
    add(t, &n, "token_embd.weight", 1);
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < 9; k++) {
            char name[40];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, per_layer[k]);
            add(t, &n, name, k != 0 && k != 5);
        }
    if (!is(v, "missing-tensor"))
        add(t, &n, "output_norm.weight", 0);
    add(t, &n, "output.weight", 1);
    if (is(v, "wrong-shape"))
        t[2].ne[1] = HIDDEN / 2, t[2].nbytes /= 2; /* blk.0.attn_q: half its rows */
    if (is(v, "unknown-dtype"))
        t[4].type = 31; /* blk.0.attn_v: an id ggml removed */
    if (is(v, "dims-overflow"))
        t[0].ne[0] = t[0].ne[1] = 1ll << 32;
    if (is(v, "duplicate-name"))
        snprintf(t[4].name, sizeof t[4].name, "%s", t[3].name);

    /* The metadata: keys the llama family reads, each a variant's target. */
    struct {
        const char *key;
        int f32; /* 0 u32, 1 f32, 2 u64 */
        double value;
    } kv[] = {
        {"llama.block_count", 0, LAYERS},
        {"llama.embedding_length", 0, HIDDEN},
        {"llama.feed_forward_length", 0, HIDDEN},
        {"llama.attention.head_count", 0, 2},
        {"llama.attention.head_count_kv", 0, 2},
        {"llama.context_length", 0, 16},
        {"llama.attention.layer_norm_rms_epsilon", 1, 1e-5},
        {"llama.rope.freq_base", 1, 10000},
    };
    int n_kv = (int)(sizeof kv / sizeof kv[0]);
    const char *drop = is(v, "no-block-count") ? "llama.block_count"
                       : is(v, "no-embedding-length") ? "llama.embedding_length"
                       : is(v, "no-head-count") ? "llama.attention.head_count" : "";
    kv[0].value = is(v, "block-count-1") ? 1 : kv[0].value;
    kv[2].value = is(v, "ffn-length-0") ? 0 : kv[2].value;
    kv[3].value = is(v, "head-count-0") ? 0 : is(v, "head-count-3") ? 3 : kv[3].value;
    kv[4].value = is(v, "head-count-3") || is(v, "head-count-kv-3") ? 3 : kv[4].value;
    kv[5].f32 = is(v, "context-huge") ? 2 : 0;
    kv[5].value = is(v, "context-huge") ? 1099511627776.0 : kv[5].value;
    kv[6].value = is(v, "eps-nan") ? NAN : is(v, "eps-negative") ? -1e-5 : kv[6].value;
    kv[7].value = is(v, "theta-nan") ? NAN : is(v, "theta-0") ? 0 : kv[7].value;
    int written = 2 + n_kv - (*drop != 0);
    uint64_t n_t = (uint64_t)n + is(v, "tensor-count+1") - is(v, "tensor-count-1");
    gp_gw_header(w, 3, n_t, is(v, "kv-count-past-end") ? 1000 : (uint64_t)written);
    if (is(v, "string-past-end")) {
        gp_gw_key(w, "general.architecture", GP_GGUF_STRING);
        gp_gw_u64(w, 1ull << 40);
        gp_gw_bytes(w, "llama", 5);
    } else {
        gp_gw_kv_str(w, "general.architecture", "llama");
    }
    gp_gw_kv_u32(w, "general.alignment", is(v, "alignment-64") ? 64 : 32);
    for (int i = 0; i < n_kv; i++) {
        if (!strcmp(kv[i].key, drop))
            continue;
        if (i == 0 && is(v, "block-count-string"))
            gp_gw_kv_str(w, kv[i].key, "2");
        else if (kv[i].f32 == 1)
            gp_gw_key(w, kv[i].key, GP_GGUF_FLOAT32), gp_gw_f32(w, (float)kv[i].value);
        else if (kv[i].f32 == 2)
            gp_gw_key(w, kv[i].key, GP_GGUF_UINT64), gp_gw_u64(w, (uint64_t)kv[i].value);
        else
            gp_gw_kv_u32(w, kv[i].key, (uint32_t)kv[i].value);
    }

    /* Tensor infos at 32-byte offsets, then the data, each at the next multiple of 32. */
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t at = off;
        if (is(v, "offset-past-end") && i == n - 2)
            at = 4096;
        if (is(v, "overlap") && i == 3)
            at -= 128; /* blk.0.attn_k over blk.0.attn_q */
        gp_gw_tensor_info(w, t[i].name, t[i].ndim, t[i].ne, t[i].type, at);
        off += (t[i].nbytes + 31) / 32 * 32;
    }
    size_t infos_end = w->len;
    gp_gw_pad(w, 32);
    if (is(v, "padding-nonzero") && w->len > infos_end) /* the infos end off the alignment */
        w->buf[infos_end] = 1;
    for (int i = 0; i < n; i++) {
        gp_gw_bytes(w, t[i].data, t[i].nbytes);
        if (i + 1 < n)
            gp_gw_pad(w, 32);
    }
    if (is(v, "data-truncated"))
        w->len -= 100;
}

static int save(const char *dir, const char *name, const char *v)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/hostile-%s.gguf", dir, name);
    gp_gw w;
    gp_gw_init(&w);
    write_model(&w, v);
    int rc = gp_gw_save(&w, path);
    gp_gw_free(&w);
    if (rc)
        fprintf(stderr, "gguf-hostile: cannot write %s\n", path);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gguf-hostile DIR\n");
        return 2;
    }
    if (save(argv[1], "base", NULL))
        return 1;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        if (save(argv[1], variants[i].name, variants[i].name))
            return 1;
        printf("%s\t%s\t%s\n", variants[i].name, variants[i].cls, variants[i].want);
    }
    return 0;
}
