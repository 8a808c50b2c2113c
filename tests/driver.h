/* The CUnit driver's view of the suites it runs (see tests/CMakeLists.txt). */
#ifndef GP_TESTS_DRIVER_H
#define GP_TESTS_DRIVER_H

typedef struct {
    const char *name;
    void (*add)(void);  /* registers this module's CUnit suites */
} gp_suite_entry;

extern const gp_suite_entry gp_suites[];

#endif
