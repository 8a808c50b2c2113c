/* LoRA adapters (PEFT layout) merged into a model's weights before sessions are created: the
 * adapter reader and the merge, which runs on the CPU kernels with one scratch buffer planned up
 * front. The public entry point is gp_model_apply_lora (declared in runtime/gplan.h's style here). */
#ifndef GP_RUNTIME_LORA_H
#define GP_RUNTIME_LORA_H

#include <stddef.h>

#include "runtime/gplan.h"
#include "runtime/plan.h"

/*
 * Merges the PEFT LoRA adapter in folder `dir` into the model's bound weights:
 *   dir/adapter_config.json       r, lora_alpha, target_modules (a list of module names),
 *                                 fan_in_fan_out (default false), use_rslora (default false)
 *   dir/adapter_model.safetensors base_model.model.<module>.lora_A.weight [r, in] and
 *                                 base_model.model.<module>.lora_B.weight [out, r] (f32/f16/bf16)
 * For each module, the plan weight "<module>.weight" becomes W + s * delta, with
 *   s = scale * lora_alpha / r (use_rslora: scale * lora_alpha / sqrt(r)),
 *   delta = B A [out, in] (torch Linear, W is [out, in]: Llama's q_proj ... down_proj), or
 *   delta = (B A)^T [in, out] when fan_in_fan_out (GPT-2's Conv1D c_attn, c_proj, c_fc: W [in, out]).
 * Known target modules: c_attn c_proj c_fc q_proj k_proj v_proj o_proj gate_proj up_proj down_proj.
 * Merged weights are copies in one allocation the model owns (the mapped checkpoint is never
 * written); the delta's temporaries live in one scratch buffer sized for the largest target, so the
 * merge allocates nothing per module. The plan (graph, regions, costs) is unchanged.
 * Call after binding weights and before creating sessions; one adapter per binding (bind again
 * to apply another). 0, or -1 with err set, e.g.
 *   lora: "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight": expected shape [4, 64],
 *   file has [4, 32] (target "transformer.h.0.attn.c_attn.weight" [64, 192], fan_in_fan_out)
 * and the model's weights unchanged. */
int gp_model_apply_lora(gp_model *m, const char *dir, double scale, char *err, size_t err_len);

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

/* 1 when a checkpoint name is a runtime adapter slot's: base_model.model.*.lora_{A,B}.weight. */
int gp_lora_is_slot(const char *weight_name);

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
