/* Cutting a device's share of a split weight out of its checkpoint tensor (gp_split, ir/core.h):
 * used when binding the weights of a tensor-parallel plan. */
#ifndef GP_RUNTIME_SPLIT_H
#define GP_RUNTIME_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"

/* Elements of the whole checkpoint tensor of t (its dims with the split dim at split.full). */
int64_t gp_split_full_numel(const gp_plan_tensor *t);

/* Copies rank's share of `full` (the checkpoint tensor, dtype and layout of t, contiguous) into
 * `out` (t's dims, contiguous): in each group the rank's run of units, zeros where the run passes
 * the last unit. t must be a validated plan tensor with split.groups > 0. */
void gp_split_copy(const gp_plan_tensor *t, int rank, const void *full, void *out);

#endif
