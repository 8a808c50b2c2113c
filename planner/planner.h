/* The static planner: turns a checked graph (ir/) into a gp_plan (plan/plan.h, which also writes
 * plan files: docs/plan-format.md) by liveness over the schedule, in-place reuse, op workspaces,
 * extras slots and offset assignment (planner/assign.h). */
#ifndef GP_PLANNER_PLANNER_H
#define GP_PLANNER_PLANNER_H

#include "gplan/compile.h" /* gp_plan_opts */
#include "ir/ir.h"
#include "plan/plan.h"
#include "planner/assign.h"

#define GP_PLAN_DEFAULT_ALIGNMENT 256

/* Builds the plan of g. o may be NULL (all defaults; a zeroed gp_plan_opts is the defaults too).
 * Returns 0 and *out, or -1 after reporting to d (bad options, a graph too large, out of memory,
 * or an overlap found by the independent checker, which would be a planner bug). */
int gp_plan_build(const gp_graph *g, const gp_plan_opts *o, gp_plan **out, gp_diag *d);

/* Temporary bytes the node needs while it runs on `backend`, at the bounds of g's shapes
 * (the formulas are in plan/plan.h, GP_WS_*). 0 for none. */
int64_t gp_op_workspace_bytes(const gp_node *node, const gp_graph *g, gp_backend backend);

/*
 * Liveness over the schedule (node index = step), used by gp_plan_build and exposed for tests.
 * A tensor's own lifetime is [first, last]: first is its producer's step (0 for tensors no node
 * produces), last the last step that reads it (first when nothing does). A view shares its root's
 * storage (the end of its view chain); the storage must live until the last read of any tensor on it.
 */
typedef struct {
    int n_tensors;
    int *first;          /* [n_tensors] */
    int *last;           /* [n_tensors] own last read */
    int *root;           /* [n_tensors] storage root: the tensor itself unless it is a view */
    int64_t *root_offset; /* [n_tensors] byte offset of the tensor within its root's storage */
    int *storage_last;   /* [n_tensors] roots: max of last over the tensors sharing it; else -1 */
} gp_liveness;

/* NULL after reporting to d (a malformed view chain, out of memory). */
gp_liveness *gp_liveness_new(const gp_graph *g, gp_diag *d);
void gp_liveness_free(gp_liveness *lv);

#endif
