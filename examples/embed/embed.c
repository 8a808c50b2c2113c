/* examples/embed: a program that embeds gplan, built against an installed gplan (CMakeLists.txt
 * with find_package, or Makefile with pkg-config): loads a plan, binds weights (a checkpoint or
 * random ones), then generates greedily from a prompt of token ids and prints the new ids.
 * Usage: embed PLAN (WEIGHTS | --random-weights SEED) [N [ID...]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gplan/gplan.h>

int main(int argc, char **argv)
{
    if (argc < 3 || (!strcmp(argv[2], "--random-weights") && argc < 4)) {
        fprintf(stderr, "usage: embed PLAN (WEIGHTS | --random-weights SEED) [N [ID...]]\n"
                        "(gplan %s)\n", GPLAN_VERSION_STRING);
        return 2;
    }
    int random = !strcmp(argv[2], "--random-weights");
    int arg = random ? 4 : 3;
    int n_gen = arg < argc ? atoi(argv[arg++]) : 16;
    char err[1024];
    gp_model *m = gp_model_load(argv[1], err, sizeof err);
    if (!m) {
        fprintf(stderr, "embed: %s\n", err);
        return 1;
    }
    int rc = random ? gp_model_random_weights(m, strtoull(argv[3], NULL, 10), err, sizeof err)
                    : gp_model_bind_weights(m, argv[2], err, sizeof err);
    gp_model_info info;
    gp_model_get_info(m, &info);
    if (!rc && (!info.tokens || !info.logits || info.vocab < 1)) {
        snprintf(err, sizeof err, "%s: not a language model", argv[1]);
        rc = -1;
    }
    gp_session_opts opts = {"cpu", 1, 0};
    gp_session *s = rc ? NULL : gp_session_new(m, &opts, err, sizeof err);
    if (!s) {
        fprintf(stderr, "embed: %s\n", err);
        gp_model_free(m);
        return 1;
    }

    /* The prompt: token ids from the command line (0 when none). Once the tokenizer is part of
     * libgplan, this is where text would be encoded to ids (and the ids below decoded back). */
    int64_t n = argc - arg > 0 ? argc - arg : 1, cap = info.context > 0 ? info.context : n + n_gen;
    int32_t *ids = calloc((size_t)(cap > n ? cap : n), sizeof *ids); /* [n + generated] */
    int32_t *pos = calloc((size_t)(cap > n ? cap : n), sizeof *pos); /* [n] */
    if (!ids || !pos || n > info.max_tokens || n > cap) {
        fprintf(stderr, "embed: the prompt does not fit the plan (or out of memory)\n");
        rc = 1;
    }
    for (int64_t i = 0; !rc && i < n; i++) {
        ids[i] = argc - arg > 0 ? (int32_t)atoi(argv[arg + i]) : 0;
        pos[i] = (int32_t)i;
    }

    /* Greedy generation: eval the prompt at once, then one token per eval, each the argmax of the
     * last row of logits ([R, vocab]: set_tokens asks for the last token's row only when the graph
     * has a rows input, else every token's), until N tokens or the end of the planned context. */
    int64_t past = 0, cur = n;
    for (int made = 0; !rc && made < n_gen; made++) {
        if (gp_session_set_tokens(s, ids + past, pos, cur) || gp_session_eval(s)) {
            fprintf(stderr, "embed: %s\n", gp_session_error(s));
            rc = 1;
            break;
        }
        gp_tensor_info li;
        const float *logits = gp_session_output(s, info.logits, &li);
        int32_t next = (int32_t)gp_argmax(logits + (li.ne[0] - 1) * info.vocab, info.vocab);
        printf("%s%d", made ? " " : "", next);
        past += cur;
        if (past >= cap)
            break;
        ids[past] = next;
        pos[0] = (int32_t)past;
        cur = 1;
    }
    printf("\n");
    free(ids);
    free(pos);
    gp_session_free(s);
    gp_model_free(m);
    return rc;
}
