/* Suites "cuda" and "cuda_host": the CUDA backend's tests, in tests/cuda/test_cuda_*.c. Every op on
 * the GPU against gp_cpu_compute (normalized error, a tolerance per op, outputs poisoned first), sizes
 * read from the param block, and whole-model parity CPU vs CUDA with no allocation during evals.
 * Without a GPU suite "cuda" registers no test and says so: skipped, not passed. */
#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "tests/cuda/cuda_tests.h"
#include "tests/testutil.h"

void gp_suite_cuda(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        cudaGetLastError();
        gp_test_skip("cuda", "no GPU");
        return;
    }
    static const gp_test_case tests[] = {
        {"elementwise ops and broadcasting", test_elementwise},
        {"norms and softmax", test_norms_softmax},
        {"rope, get_rows, cont/cast, concat", test_rope_rows_copies},
        {"get_rows_add: two lookups and their sum in one launch", test_get_rows_add},
        {"store: the last repeated position wins", test_store},
        {"store2: K and V stores in one launch, strided sources", test_store2},
        {"matvec computing the norm before it", test_matvec_prenorm},
        {"matvec pairs: two short rows per warp", test_matvec_pairs},
        {"argmax: first of the largest, NaN never", test_argmax},
        {"matvec cluster: [K, N] splits combined in a cluster", test_matvec_cluster},
        {"matvec add: splits added into a residual in place", test_matvec_add},
        {"matvec acc: zeroed outputs added into, gelu(x) staged", test_matvec_acc},
        {"matvec group: q/k/v and gate/up/swiglu in one launch", test_matvec_group},
        {"matvec group computing the rms_norm before it", test_matvec_group_norm},
        {"attention: split-KV decode and prompts", test_attention},
        {"attention: a ragged batch over KV blocks", test_attention_ragged},
        {"one-token attention with ropes and K/V stores inside", test_attention_decode},
        {"atthead: one-token attention in one block a head", test_attention_head},
        {"prompts: a cuBLAS product's epilogue in one launch", test_blas_epilogue},
        {"prompts: attention in tiles, on tensor cores, against the CPU", test_model_prompt_tiles},
        {"one-token attention: output over q, pos out of range, refusals",
         test_attention_decode_edges},
        {"matmul: matvec, cuBLAS, batched, fallback", test_matmul},
        {"sizes from the param block", test_param_block},
        {"moe: every weight dtype, T 1, 3, 17, top k 1, 2, 8, against the CPU", test_moe_ops},
        {"moe: Qwen3-MoE and Mixtral CPU vs CUDA, no eval allocations", test_moe_models},
        {"tiny model f32: CPU vs CUDA, no eval allocations", test_model_f32},
        {"tiny model f16 weights: CPU vs CUDA", test_model_f16},
        {"tiny model: fusions off, PDL on and off", test_model_switches},
        {"Llama and GPT-2 decode: one-token attention fused or not", test_model_attnfuse},
        {"GPT-2 decode: c_attn inside the one-token attention or not", test_model_qkvatt},
        {"GPT-2 decode: residual products adding with atomics or not", test_model_atomic},
        {"GPT-2 decode: layer norms folded into their products or not", test_model_fold},
        {"GPT-2 decode: products adding into zeroed outputs or not", test_model_accum},
        {"GPT-2 decode: kernel instances for the operands' dtypes or generic ones",
         test_model_typed},
        {"GPT-2 decode: one-token attention in one block a head or in a cluster",
         test_model_atthead},
        {"GPT-2 decode: the split attention past the rows atthead loads early",
         test_model_atthead_long},
        {"GPT-2 decode: products letting the next one start at their start or not",
         test_model_trig},
        {"GPT-2 decode: the attention letting c_proj start at its start or not",
         test_model_atttrig},
        {"Llama and GPT-2 decode: inputs and outputs in one copy each or not", test_model_copies},
        {"LoRA runtime mode: adapters rebound in a live session", test_lora_rebind},
        {"LoRA runtime mode: branches merged into the products, ranks 8 and 64", test_model_lora},
        {"LoRA runtime mode: GPT-2 117M-shaped decode fuses as without branches",
         test_model_lora_117m},
        {"quant: products on the eight block types against the CPU", test_quant_matmul},
        {"quant: get_rows on quantized tables", test_quant_get_rows},
        {"quant: q/k/v and gate/up/swiglu groups in one launch", test_quant_group},
        {"quant: layouts the products refuse", test_quant_matmul_refusals},
        {"quant: Llama q4_k, q8_0, q4_1: CUDA vs CPU, no eval allocations", test_quant_model},
        {"quant: speed of the products (printed)", test_quant_speed},
        {"families: rope with llama3, linear and LongRoPE scaling, freq_factors", test_fam_rope},
        {"families: scale's softcap, rms_norm's weight offset", test_fam_scale_norm},
        {"families: ring stores, alone and paired", test_fam_store_ring},
        {"families: attention with windows, rings, soft-capping", test_fam_attention},
        {"families: one-token attention with them, fused", test_fam_decode},
        {"families: llama3, mistral, phi3, gemma2, gemma3 CPU vs CUDA", test_fam_models},
    };
    gp_test_add_suite("cuda", NULL, NULL, tests, GP_TEST_COUNT(tests));
}

/* What runs without a GPU. */
void gp_suite_cuda_host(void)
{
    static const gp_test_case tests[] = {
        {"quant: the kernels' dequantization on the host, bit for bit", test_quant_deq8_host},
        {"quant: k_qdot's arithmetic on the host within its error bound", test_qdot_host},
        {"moe: routing and grouping on the host, as the CPU's", test_moe_host},
        {"moe: the CUDA workspace's layout within the CPU's", test_moe_ws_host},
    };
    gp_test_add_suite("cuda_host", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
