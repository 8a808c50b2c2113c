/* The LoRA merge graph: from a model graph compiled with -D lora_r=R (adapter weights declared with
 * PEFT names), the small graph that adds s * B A into each target weight, for gplan-compile
 * --lora-merge to plan and write as an ordinary plan file (runtime/lora.c runs it). */
#ifndef GP_PLANNER_LORA_MERGE_H
#define GP_PLANNER_LORA_MERGE_H

#include "ir/ir.h"

/*
 * Finds every (W, A, B) triple of g by PEFT naming: a weight "base_model.model.X.lora_A.weight"
 * [R, in], its "base_model.model.X.lora_B.weight" [out, R] and the base weight "X.weight", whose
 * layout comes from the matmul that reads it in g: tb=1 is a torch Linear W [out, in], tb=0 a
 * Conv1D W [in, out] (GPT-2). Returns a new graph "<g>_lora_merge" with, per triple in g's order:
 *   weight "X.weight"                           W, dtype and shape as in g (bound to the model's)
 *   input  "base_model.model.X.lora_A.weight"   f32 [R, in]   (set from the adapter)
 *   input  "base_model.model.X.lora_B.weight"   f32 [out, R]
 *   "X.delta"  = matmul(B, A)             f32 [out, in]   (Conv1D: matmul(A, B, ta=1, tb=1),
 *                                                           f32 [in, out] = (B A)^T)
 *   "X.scaled" = mul(X.delta, lora_scale) f32              (in place by the planner)
 *   output "X.merged" = add(W, X.scaled)  W's dtype and shape: the merged weight
 * and one input "lora_scale" f32 [1] (GP_LORA_SCALE_INPUT, plan/plan.h) shared by all.
 * NULL after reporting to d (no LoRA weights in g, a lora_A without its lora_B or base weight,
 * shapes that fit neither layout).
 */
gp_graph *gp_lora_merge_graph(const gp_graph *g, gp_diag *d);

#endif
