/* Tests of the family table (suite "family"): every family's embedded graph is its examples/ file
 * and compiles, with its parity fixture's config and alone; every weight it declares has a GGUF
 * name; lookups by name, GGUF architecture and markers, config.json; the messages; the list; the
 * table against examples/; gplan-compile --gguf's parameters read through the table. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl.h"
#include "family/family.h"
#include "family/gguf_params.h"
#include "family/graphs.h"
#include "tests/gguf_writer.h"
#include "tests/testutil.h"
#include "tokenizer/chat.h"

/* The graphs of examples/ that are no family: the quick start's toy model. */
static const char *const not_families[] = {"tiny.gplan"};

static gp_graph *compile(const gp_family *f, const char *config, const char *define, gp_diag *d)
{
    const char *defs[1] = {define};
    gp_dsl_opts o = {.defines = defs, .n_defines = define != NULL, .config_path = config};
    return gp_dsl_compile_string(f->graph_file, f->graph_text, f->graph_len, &o, d);
}

/* Every weight of g has a GGUF alias under the family's architecture that maps back. gpt_oss is
 * the exception: its graph reads transformers' fused experts, which no GGUF file holds, and its
 * GGUF files are refused (family/gguf_params.h, gp_gguf_params_derive_gpt_oss). */
static int weights_have_gguf_names(const gp_family *f, const gp_graph *g)
{
    int ok = 1;
    if (!strcmp(f->name, "gpt_oss"))
        return 1;
    for (int i = 0; i < g->n_tensors; i++) {
        const char *name = g->tensors[i].weight_name;
        if (g->tensors[i].kind != GP_TENSOR_WEIGHT || !name)
            continue;
        char gguf[256], back[256];
        if (gp_gguf_name_from_hf(f->gguf_arch, name, gguf, sizeof gguf) ||
            gp_gguf_name_to_hf(f->gguf_arch, gguf, back, sizeof back) || strcmp(back, name)) {
            fprintf(stderr, "\n%s: weight %s has no GGUF name under %s\n", f->name, name,
                    f->gguf_arch);
            ok = 0;
        }
    }
    return ok;
}

static void test_graphs_compile(void)
{
    CU_ASSERT_EQUAL_FATAL(gp_family_count(), 12);
    for (int i = 0; i < gp_family_count(); i++) {
        const gp_family *f = gp_family_at(i);
        char rel[128], fixture[128], ctx[96];
        snprintf(rel, sizeof rel, "examples/%s", f->graph_file);
        size_t len = 0;
        char *file = gp_test_read_file(gp_test_path(rel), &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(file);
        CU_ASSERT_EQUAL(f->graph_len, len);
        CU_ASSERT(len == f->graph_len && !memcmp(file, f->graph_text, len));
        CU_ASSERT_EQUAL(f->graph_text[f->graph_len], 0);
        free(file);

        /* Alone (the defaults), then with the parity fixture's config and the context set by
         * ctx_param (a parameter of the graph, or -D would be refused). */
        snprintf(fixture, sizeof fixture, "tests/parity/%s/config.json", f->name);
        snprintf(ctx, sizeof ctx, "%s=48", f->ctx_param);
        for (int with_config = 0; with_config < 2; with_config++) {
            gp_diag *d = gp_diag_new(NULL);
            gp_graph *g = compile(f, with_config ? gp_test_path(fixture) : NULL,
                                  with_config ? ctx : NULL, d);
            if (!g)
                fprintf(stderr, "\n%s:\n%s", f->name, gp_diag_text(d));
            CU_ASSERT_PTR_NOT_NULL(g);
            if (g) {
                CU_ASSERT_STRING_EQUAL(g->name, f->name);
                CU_ASSERT_TRUE(weights_have_gguf_names(f, g));
            }
            gp_graph_free(g);
            gp_diag_free(d);
        }
    }
}

static void test_lookup(void)
{
    for (int i = 0; i < gp_family_count(); i++) {
        const gp_family *f = gp_family_at(i);
        char file[64];
        snprintf(file, sizeof file, "%s.gplan", f->name);
        CU_ASSERT_STRING_EQUAL(f->graph_file, file);
        CU_ASSERT_PTR_EQUAL(gp_family_by_name(f->name), f);
        CU_ASSERT_PTR_NOT_NULL(f->hf_model_types);
        CU_ASSERT_PTR_NOT_NULL(f->hf_class);
        CU_ASSERT_PTR_NOT_NULL(f->ctx_param);
        gp_chat_format cf;
        CU_ASSERT(!f->chat_format || gp_chat_format_parse(f->chat_format, &cf) == 0);
        /* One unmarked family an architecture; the families of one share its reading. */
        const gp_family *plain = gp_family_find(f->gguf_arch);
        CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
        CU_ASSERT_STRING_EQUAL(plain->gguf_arch, f->gguf_arch);
        CU_ASSERT_PTR_NULL(plain->gguf_markers);
        CU_ASSERT(f->gguf_markers || plain == f);
        CU_ASSERT_PTR_EQUAL(f->gguf, plain->gguf);
    }
    CU_ASSERT_PTR_NULL(gp_family_at(-1));
    CU_ASSERT_PTR_NULL(gp_family_at(gp_family_count()));
    CU_ASSERT_PTR_NULL(gp_family_by_name("mamba"));
    CU_ASSERT_PTR_NULL(gp_family_by_name(NULL));
    CU_ASSERT_PTR_EQUAL(gp_family_find("llama"), gp_family_by_name("llama"));
    CU_ASSERT_PTR_EQUAL(gp_family_find("qwen3"), gp_family_by_name("qwen3"));
    CU_ASSERT_PTR_EQUAL(gp_family_find("gpt2"), gp_family_by_name("gpt2"));
    CU_ASSERT_PTR_NULL(gp_family_find("llama3")); /* a family, not an architecture */
    CU_ASSERT_PTR_NULL(gp_family_find("mamba"));
    CU_ASSERT_STRING_EQUAL(gp_family_by_name("gpt2")->ctx_param, "n_positions");
    CU_ASSERT_STRING_EQUAL(gp_family_by_name("qwen2")->chat_format, "chatml");
    CU_ASSERT_PTR_NULL(gp_family_by_name("gpt2")->chat_format);
}

static void test_list_text(void)
{
    static const char want[] =
        "gemma2, gemma3, gpt2, gpt_oss, llama, llama3, mistral, mixtral, phi3, qwen2, qwen3, "
        "qwen3moe";
    char buf[256];
    CU_ASSERT_EQUAL(gp_family_list_text(buf, sizeof buf), strlen(want));
    CU_ASSERT_STRING_EQUAL(buf, want);
    /* Every family once, in strcmp order. */
    int n = 0;
    const char *prev = NULL;
    for (char *s = strtok(buf, ", "); s; s = strtok(NULL, ", "), n++) {
        CU_ASSERT_PTR_NOT_NULL(gp_family_by_name(s));
        CU_ASSERT(!prev || strcmp(prev, s) < 0);
        prev = s;
    }
    CU_ASSERT_EQUAL(n, gp_family_count());
    /* A short buffer: cut and NUL-terminated, the whole length returned. */
    CU_ASSERT_EQUAL(gp_family_list_text(buf, 5), strlen(want));
    CU_ASSERT_STRING_EQUAL(buf, "gemm");
    CU_ASSERT_EQUAL(gp_family_list_text(NULL, 0), strlen(want));
}

/* The embedded graphs are examples/'s .gplan files, and each but not_families is one family's. */
static void test_table_matches_examples(void)
{
    DIR *dir = opendir(gp_test_path("examples"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    int on_disk = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        size_t n = strlen(e->d_name);
        if (n <= 6 || strcmp(e->d_name + n - 6, ".gplan"))
            continue;
        on_disk++;
        int embedded = 0;
        for (int i = 0; i < GP_FAMILY_N_GRAPHS; i++)
            embedded += !strcmp(gp_family_graphs[i].file, e->d_name);
        CU_ASSERT_EQUAL(embedded, 1);
    }
    closedir(dir);
    CU_ASSERT_EQUAL(on_disk, GP_FAMILY_N_GRAPHS);

    int n_not = (int)(sizeof not_families / sizeof not_families[0]);
    CU_ASSERT_EQUAL(gp_family_count(), GP_FAMILY_N_GRAPHS - n_not);
    for (int i = 0; i < GP_FAMILY_N_GRAPHS; i++) {
        int rows = 0, excluded = 0;
        for (int k = 0; k < gp_family_count(); k++)
            if (!strcmp(gp_family_at(k)->graph_file, gp_family_graphs[i].file)) {
                rows++;
                CU_ASSERT_PTR_EQUAL(gp_family_at(k)->graph_text, gp_family_graphs[i].text);
            }
        for (int k = 0; k < n_not; k++)
            excluded += !strcmp(not_families[k], gp_family_graphs[i].file);
        if (rows + excluded != 1)
            fprintf(stderr, "\nexamples/%s: %d family rows\n", gp_family_graphs[i].file, rows);
        CU_ASSERT_EQUAL(rows + excluded, 1);
    }
}

/* ---- GGUF files ---- */

typedef struct {
    const char *key;
    const char *s; /* a string, else the u32 u */
    uint32_t u;
} kv;

/* A GGUF file at path: general.architecture (when arch), the kvs, and f32 [4, 2] tensors. */
static void write_gguf(const char *path, const char *arch, const kv *kvs, int n_kv,
                       const char *const *tensors, int n_t)
{
    static const float data[8];
    gp_gw w;
    gp_gw_init(&w);
    gp_gw_header(&w, 3, (uint64_t)n_t, (uint64_t)(n_kv + (arch != NULL)));
    if (arch)
        gp_gw_kv_str(&w, "general.architecture", arch);
    for (int i = 0; i < n_kv; i++) {
        if (kvs[i].s)
            gp_gw_kv_str(&w, kvs[i].key, kvs[i].s);
        else
            gp_gw_kv_u32(&w, kvs[i].key, kvs[i].u);
    }
    const int64_t ne[2] = {4, 2};
    for (int i = 0; i < n_t; i++)
        gp_gw_tensor_info(&w, tensors[i], 2, ne, 0, (uint64_t)i * 32);
    gp_gw_pad(&w, 32);
    for (int i = 0; i < n_t; i++)
        gp_gw_bytes(&w, data, sizeof data);
    CU_ASSERT_EQUAL(gp_gw_save(&w, path), 0);
    gp_gw_free(&w);
}

/* The family gp_family_from_gguf finds for such a file, or NULL (err then in err). */
static const gp_family *gguf_family(const char *arch, const kv *kvs, int n_kv,
                                    const char *const *tensors, int n_t, char *err, size_t n)
{
    const char *path = gp_test_tmpfile("gguf");
    write_gguf(path, arch, kvs, n_kv, tensors, n_t);
    const gp_family *f = (const gp_family *)1;
    int rc = gp_family_from_gguf(path, &f, err, n);
    CU_ASSERT_EQUAL(rc, f ? 0 : -1);
    char open_err[512];
    gp_gguf *g = gp_gguf_open(path, open_err, sizeof open_err);
    CU_ASSERT_PTR_NOT_NULL(g);
    CU_ASSERT_PTR_EQUAL(gp_family_find_gguf(g), f);
    gp_gguf_close(g);
    remove(path);
    return f;
}

static void test_from_gguf(void)
{
    char err[1024];
    const char *embd[] = {"token_embd.weight"};
    const char *freqs[] = {"token_embd.weight", "rope_freqs.weight"};
    static const kv bpe[] = {{"tokenizer.ggml.pre", "llama-bpe", 0}};
    static const kv spm[] = {{"tokenizer.ggml.pre", "default", 0}};
    static const kv window[] = {{"llama.attention.sliding_window", NULL, 4096}};
    static const kv named[] = {{"general.name", "Mistral 7B Instruct v0.3", 0}};
    static const kv other[] = {{"general.name", "TinyLlama 1.1B Chat", 0}};
    static const kv experts[] = {{"llama.expert_count", NULL, 8}};
    static const kv no_experts[] = {{"llama.expert_count", NULL, 0}};
    /* Mixtral: llama with experts (and its name holds no "mistral"); 0 experts: llama */
    static const kv mixtral[] = {{"general.name", "Mixtral 8x7B Instruct v0.1", 0},
                                 {"llama.expert_count", NULL, 8}};
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", experts, 1, embd, 1, err, sizeof err),
                        gp_family_by_name("mixtral"));
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", mixtral, 2, embd, 1, err, sizeof err),
                        gp_family_by_name("mixtral"));
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", no_experts, 1, embd, 1, err, sizeof err),
                        gp_family_by_name("llama"));
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", NULL, 0, embd, 1, err, sizeof err),
                        gp_family_by_name("llama"));
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", spm, 1, embd, 1, err, sizeof err),
                        gp_family_by_name("llama"));
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", other, 1, embd, 1, err, sizeof err),
                        gp_family_by_name("llama"));
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", NULL, 0, freqs, 2, err, sizeof err),
                        gp_family_by_name("llama3"));
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", bpe, 1, embd, 1, err, sizeof err),
                        gp_family_by_name("llama3"));
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", window, 1, embd, 1, err, sizeof err),
                        gp_family_by_name("mistral"));
    CU_ASSERT_PTR_EQUAL(gguf_family("llama", named, 1, embd, 1, err, sizeof err),
                        gp_family_by_name("mistral"));
    /* Markers of one architecture mean nothing under another. */
    CU_ASSERT_PTR_EQUAL(gguf_family("qwen2", bpe, 1, freqs, 2, err, sizeof err),
                        gp_family_by_name("qwen2"));
    static const char *const archs[] = {"qwen3", "gpt2", "gemma2", "gemma3", "phi3", "qwen3moe"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        CU_ASSERT_PTR_EQUAL(gguf_family(archs[i], NULL, 0, embd, 1, err, sizeof err),
                            gp_family_by_name(archs[i]));

    /* The messages, exact. */
    const char *path = gp_test_tmpfile("gguf");
    write_gguf(path, "mamba", NULL, 0, embd, 1);
    const gp_family *f = (const gp_family *)1;
    CU_ASSERT_EQUAL(gp_family_from_gguf(path, &f, err, sizeof err), -1);
    CU_ASSERT_PTR_NULL(f);
    char want[1024];
    snprintf(want, sizeof want,
             "%s: unsupported architecture 'mamba' (supported: gemma2, gemma3, gpt-oss, gpt2, "
             "llama, phi3, qwen2, qwen3, qwen3moe)",
             path);
    CU_ASSERT_STRING_EQUAL(err, want);
    write_gguf(path, NULL, NULL, 0, embd, 1);
    CU_ASSERT_EQUAL(gp_family_from_gguf(path, &f, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: no general.architecture string in the metadata", path);
    CU_ASSERT_STRING_EQUAL(err, want);
    remove(path);
    CU_ASSERT_EQUAL(gp_family_from_gguf(path, &f, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot open"));
    CU_ASSERT_PTR_NULL(gp_family_find_gguf(NULL));
}

/* gp_gguf_params_read through the table: a qwen2 file's keys under the config's names, llama's
 * assumptions for arch llama, and the refusal of an unknown architecture, as before. */
static void test_gguf_params(void)
{
    static const kv keys[] = {{"qwen2.block_count", NULL, 3},
                              {"qwen2.embedding_length", NULL, 64},
                              {"qwen2.attention.head_count", NULL, 4}};
    const char *embd[] = {"token_embd.weight"};
    const char *path = gp_test_tmpfile("gguf");
    char err[1024];
    gp_gguf_params p;
    write_gguf(path, "qwen2", keys, 3, embd, 1);
    CU_ASSERT_EQUAL_FATAL(gp_gguf_params_read(path, &p, err, sizeof err), 0);
    static const char *const want[] = {"num_hidden_layers=3", "hidden_size=64",
                                       "num_attention_heads=4", "num_key_value_heads=4",
                                       "vocab_size=2", "tie_word_embeddings=1", "head_dim=16"};
    CU_ASSERT_EQUAL(p.n, 7);
    for (int i = 0; i < p.n && i < 7; i++)
        CU_ASSERT_STRING_EQUAL(p.text[i], want[i]);
    gp_gguf_params_free(&p);

    static const kv llama[] = {{"llama.block_count", NULL, 3},
                               {"llama.embedding_length", NULL, 64},
                               {"llama.attention.head_count", NULL, 4}};
    write_gguf(path, "llama", llama, 3, embd, 1);
    CU_ASSERT_EQUAL_FATAL(gp_gguf_params_read(path, &p, err, sizeof err), 0);
    CU_ASSERT(p.n >= 1 && !strcmp(p.text[0], "rope_mode=gptj"));
    gp_gguf_params_free(&p);

    /* Qwen3-MoE: its expert keys under the config's names, llama.cpp's renormalised top k; a
     * file without experts is refused, naming the key. */
    static const kv moe[] = {{"qwen3moe.block_count", NULL, 2},
                             {"qwen3moe.embedding_length", NULL, 64},
                             {"qwen3moe.attention.head_count", NULL, 4},
                             {"qwen3moe.expert_count", NULL, 8},
                             {"qwen3moe.expert_used_count", NULL, 2},
                             {"qwen3moe.expert_feed_forward_length", NULL, 32}};
    write_gguf(path, "qwen3moe", moe, 6, embd, 1);
    CU_ASSERT_EQUAL_FATAL(gp_gguf_params_read(path, &p, err, sizeof err), 0);
    static const char *const moe_want[] = {"norm_topk_prob=true", "num_hidden_layers=2",
                                           "hidden_size=64", "num_attention_heads=4",
                                           "num_experts=8", "num_experts_per_tok=2",
                                           "moe_intermediate_size=32", "num_key_value_heads=4"};
    CU_ASSERT(p.n >= 8);
    for (int i = 0; i < p.n && i < 8; i++)
        CU_ASSERT_STRING_EQUAL(p.text[i], moe_want[i]);
    gp_gguf_params_free(&p);
    static const kv moe0[] = {{"qwen3moe.block_count", NULL, 2},
                              {"qwen3moe.embedding_length", NULL, 64},
                              {"qwen3moe.attention.head_count", NULL, 4},
                              {"qwen3moe.expert_count", NULL, 0},
                              {"qwen3moe.expert_used_count", NULL, 2},
                              {"qwen3moe.expert_feed_forward_length", NULL, 32}};
    write_gguf(path, "qwen3moe", moe0, 6, embd, 1);
    CU_ASSERT_EQUAL(gp_gguf_params_read(path, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "qwen3moe.expert_count"));
    if (!strstr(err, "qwen3moe.expert_count"))
        fprintf(stderr, "\n  got: %s\n", err);

    write_gguf(path, "mamba", NULL, 0, embd, 1);
    CU_ASSERT_EQUAL(gp_gguf_params_read(path, &p, err, sizeof err), -1);
    char msg[1024];
    snprintf(msg, sizeof msg,
             "%s: architecture \"mamba\" is not supported by --gguf (llama, qwen2, qwen3, "
             "qwen3moe, gpt2, gemma2, gemma3, phi3, gpt-oss)",
             path);
    CU_ASSERT_STRING_EQUAL(err, msg);
    remove(path);
}

/* ---- config.json ---- */

static const gp_family *hf_family(const char *json, char *err, size_t n)
{
    const char *path = gp_test_tmpfile("json");
    CU_ASSERT_EQUAL(gp_test_write_file(path, json, strlen(json)), 0);
    const gp_family *f = (const gp_family *)1;
    int rc = gp_family_from_hf_config(path, &f, err, n);
    CU_ASSERT_EQUAL(rc, f ? 0 : -1);
    remove(path);
    return f;
}

static void test_from_hf_config(void)
{
    char err[1024];
    static const struct {
        const char *json, *family;
    } cases[] = {
        {"{\"model_type\": \"llama\"}", "llama"},
        {"{\"model_type\": \"llama\", \"rope_scaling\": null}", "llama"},
        {"{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"linear\"}}", "llama"},
        {"{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"llama3\"}}", "llama3"},
        {"{\"model_type\": \"llama\", \"rope_parameters\": {\"rope_type\": \"llama3\"}}",
         "llama3"},
        {"{\"model_type\": \"mistral\", \"rope_scaling\": {\"rope_type\": \"llama3\"}}",
         "mistral"},
        {"{\"model_type\": \"gemma3_text\"}", "gemma3"},
        {"{\"model_type\": \"gemma3\"}", "gemma3"},
        {"{\"architectures\": [\"Qwen2ForCausalLM\"]}", "qwen2"},
        {"{\"model_type\": \"gpt2\", \"architectures\": [\"Nonsense\"]}", "gpt2"},
        {"{\"model_type\": \"mixtral\"}", "mixtral"},
        {"{\"model_type\": \"qwen3_moe\"}", "qwen3moe"},
        {"{\"architectures\": [\"Qwen3MoeForCausalLM\"]}", "qwen3moe"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const gp_family *f = hf_family(cases[i].json, err, sizeof err);
        CU_ASSERT_PTR_EQUAL(f, gp_family_by_name(cases[i].family));
        if (f != gp_family_by_name(cases[i].family))
            fprintf(stderr, "\n%s: %s\n", cases[i].json, f ? f->name : err);
    }
    /* Every parity fixture's config names its own family (llama_tied: llama's graph). */
    static const char *const fixtures[][2] = {
        {"gpt2", "gpt2"},     {"llama", "llama"},   {"llama_tied", "llama"},
        {"llama3", "llama3"}, {"mistral", "mistral"}, {"qwen2", "qwen2"},
        {"qwen3", "qwen3"},   {"gemma2", "gemma2"}, {"gemma3", "gemma3"},
        {"phi3", "phi3"},     {"phi3_longrope", "phi3"}, {"qwen3moe", "qwen3moe"},
        {"mixtral", "mixtral"}, {"gpt_oss", "gpt_oss"}};
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/parity/%s/config.json", fixtures[i][0]);
        const gp_family *f = NULL;
        CU_ASSERT_EQUAL(gp_family_from_hf_config(gp_test_path(rel), &f, err, sizeof err), 0);
        CU_ASSERT_PTR_EQUAL(f, gp_family_by_name(fixtures[i][1]));
    }

    /* The messages, exact. */
    const char *path = gp_test_tmpfile("json");
    const gp_family *f = (const gp_family *)1;
    char want[1024];
    CU_ASSERT_EQUAL(gp_test_write_file(path, "{\"model_type\": \"mamba\"}", 23), 0);
    CU_ASSERT_EQUAL(gp_family_from_hf_config(path, &f, err, sizeof err), -1);
    CU_ASSERT_PTR_NULL(f);
    snprintf(want, sizeof want,
             "%s: unsupported model_type 'mamba' (supported: gemma2, gemma3, gemma3_text, gpt2, "
             "gpt_oss, llama, mistral, mixtral, phi3, qwen2, qwen3, qwen3_moe)",
             path);
    CU_ASSERT_STRING_EQUAL(err, want);
    CU_ASSERT_EQUAL(gp_test_write_file(path, "{\"architectures\": [\"MambaForCausalLM\"]}", 39),
                    0);
    CU_ASSERT_EQUAL(gp_family_from_hf_config(path, &f, err, sizeof err), -1);
    snprintf(want, sizeof want,
             "%s: unsupported architecture 'MambaForCausalLM' (supported: GPT2LMHeadModel, "
             "Gemma2ForCausalLM, Gemma3ForCausalLM, GptOssForCausalLM, LlamaForCausalLM, "
             "MistralForCausalLM, "
             "MixtralForCausalLM, Phi3ForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
             "Qwen3MoeForCausalLM)",
             path);
    CU_ASSERT_STRING_EQUAL(err, want);
    CU_ASSERT_EQUAL(gp_test_write_file(path, "{\"vocab_size\": 5}", 17), 0);
    CU_ASSERT_EQUAL(gp_family_from_hf_config(path, &f, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: no model_type or architectures", path);
    CU_ASSERT_STRING_EQUAL(err, want);
    CU_ASSERT_EQUAL(gp_test_write_file(path, "{\"model_type\": ", 15), 0);
    CU_ASSERT_EQUAL(gp_family_from_hf_config(path, &f, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: cannot read config.json (", path);
    CU_ASSERT_EQUAL(strncmp(err, want, strlen(want)), 0);
    remove(path);
}

void gp_suite_family(void)
{
    static const gp_test_case tests[] = {
        {"every family's graph is its file and compiles", test_graphs_compile},
        {"lookups by name and architecture", test_lookup},
        {"the sorted list of names", test_list_text},
        {"the table against examples/*.gplan", test_table_matches_examples},
        {"a GGUF file's family, markers and messages", test_from_gguf},
        {"gplan-compile --gguf's parameters through the table", test_gguf_params},
        {"a config.json's family and messages", test_from_hf_config},
    };
    gp_test_add_suite("family", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
