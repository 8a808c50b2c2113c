/* Tests for offset assignment (placeholder while writing). */
#include <CUnit/CUnit.h>
void gp_suite_assign(void) {}
