/* LoRA adapters (PEFT layout): the adapter reader, merge mode (a merge plan made by gplan-compile
 * --lora-merge, run on the CPU kernels with its planned arena) and runtime mode (adapter slots).
 * The public entry points are also declared in include/gplan/gplan.h. */
#ifndef GP_RUNTIME_LORA_H
#define GP_RUNTIME_LORA_H

#include <stddef.h>

#include "gplan/gplan.h"
#include "plan/plan.h" /* also PEFT's names (GP_LORA_*) and gp_lora_is_slot */

/*
 * Merges the PEFT LoRA adapter in folder `dir` into the model's bound weights by running the merge
 * plan `merge_plan`, a plan file written by
 *     gplan-compile MODEL.gplan [the model's -D/--config] -D lora_r=R --lora-merge -o MERGE.plan
 * (planner/lora_merge.h: per target module X, delta = matmul(B, A) (Conv1D: matmul(A, B, ta, tb)),
 * scaled = delta * lora_scale, output X.merged = X.weight + scaled; docs/lora.md).
 *   dir/adapter_config.json       r, lora_alpha, target_modules (a list of module names),
 *                                 fan_in_fan_out, use_rslora (defaults false)
 *   dir/adapter_model.safetensors base_model.model.<module>.lora_A.weight [r, in] and
 *                                 base_model.model.<module>.lora_B.weight [out, r] (f32/f16/bf16)
 * Each covered weight "<module>.weight" becomes W + s * delta, s = scale * lora_alpha / r
 * (use_rslora: / sqrt(r)); delta = B A for a Linear W [out, in], (B A)^T for a Conv1D W [in, out].
 * The layout is the one the model's graph computes with (as PEFT, which overrides fan_in_fan_out
 * by layer type). Known modules: c_attn c_proj c_fc q_proj k_proj v_proj o_proj gate_proj up_proj
 * down_proj. Targets of the merge plan the adapter lacks are skipped (their weights unchanged).
 * The merge plan's arena and io region are allocated once; the io region (A and B in f32, the
 * scale and the merged weights, at planned offsets) becomes the model's block of merged weights
 * (the mapped checkpoint is never written). The model's plan (graph, regions, costs) is unchanged.
 * Call after binding weights and before creating sessions; one adapter per binding (bind again to
 * apply another). 0, or -1 with err set and the model's weights unchanged, e.g.
 *   lora: DIR: the adapter has rank 8, the merge plan MERGE rank 4 (compile it with -D lora_r=8)
 */
int gp_model_apply_lora(gp_model *m, const char *dir, const char *merge_plan, double scale,
                        char *err, size_t err_len);

/* gp_model_apply_lora in its three steps, for callers (and tests) that want them apart:
 * _new loads and checks the merge plan against the adapter and the model, allocates its arena and
 * io region, reads A, B and the scale in, and checks every node (NULL with err set); _run computes
 * the covered targets' nodes with the CPU kernels and allocates nothing (-1 when already run);
 * _finish hands the merged weights to the model (-1 with err set when the model already has an
 * adapter merged). _free(NULL) is a no-op. */
typedef struct gp_lora_merge gp_lora_merge;
gp_lora_merge *gp_lora_merge_new(gp_model *m, const char *dir, const char *merge_plan,
                                 double scale, char *err, size_t err_len);
int gp_lora_merge_run(gp_lora_merge *g);
int gp_lora_merge_finish(gp_lora_merge *g, char *err, size_t err_len);
void gp_lora_merge_free(gp_lora_merge *g);
/* Targets of the merge plan, how many the adapter covers, and its arena and io bytes. */
void gp_lora_merge_info(const gp_lora_merge *g, int *n_targets, int *n_merged, int64_t *arena,
                        int64_t *io);

/*
 * Runtime mode: binds the PEFT adapter in folder `dir` (same files as above) to the plan's adapter
 * slots, the weights named "base_model.model.<module>.lora_{A,B}.weight" that a graph compiled
 * with -D lora_r=R declares (examples/gpt2.gplan, examples/llama.gplan: y += (x A^T) B^T). Binding
 * the model's weights leaves every slot zero (no adapter). This call zeroes the slots, then copies
 * A [r, in] and s * B [out, r] (s as above; the scale is folded into B) into them, converted to the
 * slot dtype: no allocation for the weights, no replanning, so another adapter can be bound between
 * evals. Slots the adapter does not cover stay zero. The adapter's rank must equal the plan's.
 * Host backends (cpu, reference) read the slots in place, so sessions see the new adapter at their
 * next eval; no eval of any session of the model may run during the call. A CUDA session copies
 * the weights at creation: bind before creating it. 0, or -1 with err set, e.g.
 *   lora: "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight": the plan's slot is
 *   [192, 4], file has [96, 4]
 * and the slots unchanged. */
int gp_model_bind_adapter(gp_model *m, const char *dir, double scale, char *err, size_t err_len);

/* ---- the model's side (implemented in runtime/session.c for lora.c; not a public API) ---- */

const gp_plan *gp_model_plan(const gp_model *m);
/* Host bytes of weight tensor `id` ([numel] of its plan dtype, at the plan's dims); NULL when the
 * tensor is not a bound weight. */
const void *gp_model_weight_data(const gp_model *m, int id);
/* Writable host bytes of adapter slot `id` (a weight for which gp_lora_is_slot holds), in the
 * block the model allocated when binding its weights; NULL for other tensors or when unbound. */
void *gp_model_adapter_slot(gp_model *m, int id);
/* Gives the model `block` (posix_memalign'd, freed when the weights are unbound) and points weight
 * ids[k] and every tensor sharing its bytes (tied weights) at data[k], k < n; bytes adds to the
 * loaded bytes. -1 when the model already owns such a block (an adapter is merged). */
int gp_model_adopt_weights(gp_model *m, void *block, size_t bytes, const int *ids,
                           void *const *data, int n);

#endif
