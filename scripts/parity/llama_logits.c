/* llama_logits: llama.cpp's own run of a GGUF model as a sparse parity fixture (the format of
 * tests/parity/compare_sparse.c): the prompt's ids as llama.cpp tokenizes it (BOS added), the
 * prompt in one eval then greedy tokens, and for each evaluated position the top 32 logits and
 * every 4099th vocabulary entry. f32 KV cache, no flash attention (its CPU path rounds through
 * f16), so that on an f32 file llama.cpp computes in f32 throughout. A maintainer's tool, built
 * against a llama.cpp build by scripts/parity/make_gemma3_270m_fixture.sh, not by CMake.
 *
 * usage: llama_logits MODEL.gguf PROMPT N_GEN [N_CTX] > fixture.txt
 *   PROMPT "ids:I,J,...": those token ids as they are (no tokenizer, no BOS; a file whose
 *   tokenizer.ggml.model is "none"). N_CTX: the context size (default 4096), which picks
 *   Phi-3's LongRoPE factors (the long ones past the file's original context). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

enum { MAX_TOKENS = 4096, TOP = 32, STRIDE = 4099 };

/* "row P ID:LOGIT ... | ID:LOGIT ...": the TOP largest, then the sample. */
static void write_row(int pos, const float *row, int n_vocab)
{
    int top[TOP];
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (n == TOP && row[i] <= row[top[TOP - 1]])
            continue;
        int j = n < TOP ? n++ : TOP - 1;
        for (; j > 0 && row[top[j - 1]] < row[i]; j--)
            top[j] = top[j - 1];
        top[j] = i;
    }
    printf("row %d", pos);
    for (int k = 0; k < n; k++)
        printf(" %d:%.6f", top[k], row[top[k]]);
    printf(" |");
    for (int i = 0; i < n_vocab; i += STRIDE)
        printf(" %d:%.6f", i, row[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: llama_logits MODEL.gguf PROMPT N_GEN [N_CTX]\n");
        return 2;
    }
    int n_ctx = argc == 5 ? atoi(argv[4]) : MAX_TOKENS;
    if (n_ctx < 1 || n_ctx > MAX_TOKENS)
        return 2;
    int n_gen = atoi(argv[3]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = 0; /* no repacked weights: plain ggml kernels */
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model)
        return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_ctx;
    cp.n_ubatch = (uint32_t)n_ctx;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx)
        return 1;
    static llama_token toks[MAX_TOKENS];
    int n = 0;
    if (strncmp(argv[2], "ids:", 4) == 0) {
        for (char *p = argv[2] + 4; *p && n < MAX_TOKENS - n_gen;) {
            toks[n++] = (llama_token)strtol(p, &p, 10);
            if (*p == ',')
                p++;
        }
    } else {
        n = llama_tokenize(vocab, argv[2], (int)strlen(argv[2]), toks, MAX_TOKENS - n_gen, 1, 1);
    }
    if (n <= 0 || n + n_gen > n_ctx)
        return 1;
    printf("prompt");
    for (int i = 0; i < n; i++)
        printf(" %d", toks[i]);
    printf("\n");
    static float rows[64][262144];
    if (n_gen > 64 || n_vocab > 262144)
        return 1;
    struct llama_batch batch = llama_batch_get_one(toks, n);
    for (int s = 0; s < n_gen; s++) {
        if (llama_decode(ctx, batch))
            return 1;
        const float *lg = llama_get_logits_ith(ctx, -1);
        memcpy(rows[s], lg, sizeof(float) * (size_t)n_vocab);
        int best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (lg[i] > lg[best])
                best = i;
        toks[n + s] = best;
        batch = llama_batch_get_one(&toks[n + s], 1);
    }
    printf("greedy");
    for (int s = 0; s < n_gen; s++)
        printf(" %d", toks[n + s]);
    printf("\n");
    for (int s = 0; s < n_gen; s++) /* row s picked greedy token s */
        write_row(n - 1 + s, rows[s], n_vocab);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
