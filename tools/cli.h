/* What the thin command-line mains share: the answers to -h/--help and --version, and the one
 * form of a usage error. Header-only, so tests/parity/compare.c uses it too. */
#ifndef GP_TOOLS_CLI_H
#define GP_TOOLS_CLI_H

#include <stdio.h>
#include <string.h>

/* Exit status of bad usage, for every tool. */
enum { GP_CLI_EXIT_USAGE = 2 };

/* When arg is -h/--help (usage printed to stdout) or --version ("PROG VERSION"): 1, and the tool
 * exits with status 0; otherwise 0. */
static inline int gp_cli_help_version(const char *arg, const char *prog, const char *version,
                                      void (*usage)(FILE *))
{
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
        usage(stdout);
        return 1;
    }
    if (!strcmp(arg, "--version")) {
        printf("%s %s\n", prog, version);
        return 1;
    }
    return 0;
}

/* "PROG: MSG[: ARG]" and the pointer to --help on stderr; returns GP_CLI_EXIT_USAGE. */
static inline int gp_cli_usage_error(const char *prog, const char *msg, const char *arg)
{
    fprintf(stderr, "%s: %s%s%s\ntry '%s --help'\n", prog, msg, arg ? ": " : "", arg ? arg : "",
            prog);
    return GP_CLI_EXIT_USAGE;
}

#endif
