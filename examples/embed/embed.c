/* examples/embed: a program that embeds gplan, built against an installed gplan (CMakeLists.txt
 * with find_package, or Makefile with pkg-config): loads a model with the text API
 * (<gplan/text.h>) and streams the greedy continuation of a prompt.
 * Usage: embed [--plan PLAN] MODEL PROMPT [MAX_TOKENS]
 *   MODEL: a .gguf file or a Hugging Face folder (its graph planned in process, the plan cached);
 *   with --plan, the checkpoint of a plan made by gplan-compile. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gplan/text.h>

/* Each piece of text as it becomes final (whole UTF-8 characters). */
static int print_piece(void *user, const char *text, size_t len)
{
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0; /* nonzero would stop the generation */
}

int main(int argc, char **argv)
{
    gp_lm_opts o = gp_lm_defaults();
    int arg = 1;
    if (argc > 2 && !strcmp(argv[1], "--plan")) {
        o.plan = argv[2];
        arg = 3;
    }
    if (argc - arg < 2 || argc - arg > 3) {
        fprintf(stderr, "usage: embed [--plan PLAN] MODEL PROMPT [MAX_TOKENS]\n"
                        "MODEL: a .gguf file or a Hugging Face folder; with --plan, the plan's "
                        "checkpoint (gplan %s)\n", GPLAN_VERSION_STRING);
        return 2;
    }
    char err[1024];
    gp_lm *lm = gp_lm_load(argv[arg], &o, err, sizeof err);
    gp_seq *s = lm ? gp_seq_new(lm, NULL, err, sizeof err) : NULL; /* NULL: greedy */
    if (!s) {
        fprintf(stderr, "embed: %s\n", err);
        gp_lm_free(lm);
        return 1;
    }
    gp_gen_opts g = gp_gen_defaults();
    g.max_tokens = argc - arg > 2 ? atoll(argv[arg + 2]) : 32;
    g.on_text = print_piece;
    gp_gen_result r;
    int rc = gp_seq_generate(s, argv[arg + 1], &g, &r);
    if (rc) {
        fprintf(stderr, "embed: %s\n", gp_seq_error(s));
    } else {
        putchar('\n');
        fflush(stdout); /* before stderr's line */
        fprintf(stderr, "embed: %lld prompt tokens, %lld generated, finished by %s\n",
                (long long)r.prompt_tokens, (long long)r.completion_tokens,
                gp_finish_name(r.finish));
    }
    gp_seq_free(s);
    gp_lm_free(lm);
    return rc ? 1 : 0;
}
