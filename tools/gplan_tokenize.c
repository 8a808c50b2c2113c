/* gplan-tokenize: text to token ids (comma-separated, one line) and ids back to text, with the
 * tokenizer of a GGUF file, a tokenizer.json or a Hugging Face folder. A thin main over
 * <gplan/tokenizer.h>. Exit status: 0 ok, 1 bad model or input, 2 bad usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gplan/cli.h"
#include "gplan/gplan.h"
#include "gplan/tokenizer.h"

enum { EXIT_OK = 0, EXIT_BAD = 1, EXIT_USAGE = 2 };

static const char prog[] = "gplan-tokenize";

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gplan-tokenize [options] MODEL [TEXT | --file F]\n"
            "       gplan-tokenize [options] MODEL --decode ID,ID,...\n"
            "\n"
            "MODEL is a .gguf file, a tokenizer.json or a folder holding one. Prints the ids of\n"
            "TEXT (or of file F, or of standard input when neither is given) comma-separated\n"
            "on one line, or with --decode the text of the ids.\n"
            "\n"
            "options:\n"
            "  --file F          encode the bytes of file F\n"
            "  --decode IDS      print the text of the comma-separated ids\n"
            "  --no-special      add no BOS/EOS (default: as the vocabulary says)\n"
            "  --parse-special   special token texts in the input become their ids\n"
            "                    (default: they are plain text); with --decode, print the\n"
            "                    special tokens' texts\n"
            "  --count           print the number of ids instead of the ids\n"
            "  --version         print the version and exit\n"
            "  -h, --help        print this help and exit\n"
            "\n"
            "exit status: 0 success, 1 bad model, file or input (invalid UTF-8, bad id),\n"
            "2 bad usage\n");
}

static int decode(const gp_tok *t, const char *list, int render)
{
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = list;
    while (ids && *p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= gp_tok_vocab_size(t) ||
            (*end && *end != ',')) {
            fprintf(stderr, "gplan-tokenize: bad id at '%s' (ids are 0..%d, comma-separated)\n",
                    p, (int)gp_tok_vocab_size(t) - 1);
            free(ids);
            return EXIT_BAD;
        }
        if (n == cap) {
            int32_t *q = realloc(ids, 2 * cap * sizeof *ids);
            if (!q)
                break;
            ids = q;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!ids || *p) {
        free(ids);
        fprintf(stderr, "gplan-tokenize: out of memory\n");
        return EXIT_BAD;
    }
    int64_t need = gp_tok_decode(t, ids, (int64_t)n, render, NULL, 0);
    char *out = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (out)
        gp_tok_decode(t, ids, (int64_t)n, render, out, (size_t)need + 1);
    free(ids);
    if (!out) {
        fprintf(stderr, "gplan-tokenize: cannot decode\n");
        return EXIT_BAD;
    }
    fwrite(out, 1, (size_t)need, stdout);
    putchar('\n');
    free(out);
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL, *ids = NULL;
    int add_special = 1, parse_special = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (gp_cli_help_version(a, prog, GPLAN_VERSION_STRING, usage)) {
            return EXIT_OK;
        } else if (!strcmp(a, "--no-special"))
            add_special = 0;
        else if (!strcmp(a, "--parse-special"))
            parse_special = 1;
        else if (!strcmp(a, "--count"))
            count = 1;
        else if (!strcmp(a, "--file") || !strcmp(a, "--decode")) {
            if (i + 1 >= argc)
                return gp_cli_usage_error(prog, "missing argument for", a);
            *(a[2] == 'f' ? &file : &ids) = argv[++i];
        } else if (a[0] == '-' && a[1] == '-' && !model)
            return gp_cli_usage_error(prog, "unknown option", a);
        else if (!model)
            model = a;
        else if (!text)
            text = a;
        else
            return gp_cli_usage_error(prog, "unexpected argument", a);
    }
    if (!model)
        return gp_cli_usage_error(prog, "no MODEL given", NULL);
    if ((text != NULL) + (file != NULL) + (ids != NULL) > 1)
        return gp_cli_usage_error(prog, "give one of TEXT, --file F and --decode IDS", NULL);

    char err[1024];
    gp_tok *t = gp_tok_load(model, err, sizeof err);
    if (!t) {
        fprintf(stderr, "gplan-tokenize: %s\n", err);
        return EXIT_BAD;
    }
    int rc = EXIT_OK;
    if (ids) {
        rc = decode(t, ids, parse_special);
        gp_tok_free(t);
        return rc;
    }
    char *buf = NULL;
    size_t len = 0;
    if (text) {
        len = strlen(text);
    } else {
        FILE *f = file ? fopen(file, "rb") : stdin;
        if (!f) {
            fprintf(stderr, "gplan-tokenize: %s: cannot open (%s)\n", file, strerror(errno));
            gp_tok_free(t);
            return EXIT_BAD;
        }
        buf = gp_cli_read_all(f, &len);
        if (file)
            fclose(f);
        if (!buf) {
            fprintf(stderr, "gplan-tokenize: %s: cannot read\n", file ? file : "stdin");
            gp_tok_free(t);
            return EXIT_BAD;
        }
        text = buf;
    }
    int64_t n = gp_tok_encode(t, text, len, add_special, parse_special, NULL, 0, err, sizeof err);
    int32_t *out = n > 0 ? malloc((size_t)n * sizeof *out) : NULL;
    if (n > 0 && out)
        n = gp_tok_encode(t, text, len, add_special, parse_special, out, n, err, sizeof err);
    if (n < 0 || (n > 0 && !out)) {
        fprintf(stderr, "gplan-tokenize: %s: %s\n", file ? file : "text",
                n < 0 ? err : "out of memory");
        rc = EXIT_BAD;
    } else if (count) {
        printf("%lld\n", (long long)n);
    } else {
        for (int64_t i = 0; i < n; i++)
            printf(i ? ",%d" : "%d", (int)out[i]);
        putchar('\n');
    }
    free(out);
    free(buf);
    gp_tok_free(t);
    return rc;
}
