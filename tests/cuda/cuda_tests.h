/* The tests of suites "cuda" and "cuda_host", one group per file of tests/cuda/; registered in
 * tests/cuda/test_cuda.c. */
#ifndef GP_TESTS_CUDA_TESTS_H
#define GP_TESTS_CUDA_TESTS_H

/* test_cuda_ops.c */
void test_get_rows_add(void);
void test_elementwise(void);
void test_norms_softmax(void);
void test_rope_rows_copies(void);
void test_argmax(void);
void test_store(void);
void test_store2(void);

/* test_cuda_matvec.c */
void test_matvec_prenorm(void);
void test_matvec_cluster(void);
void test_matvec_add(void);
void test_matvec_acc(void);
void test_matvec_pairs(void);
void test_matvec_group_norm(void);
void test_matvec_group(void);

/* test_cuda_matmul.c */
void test_blas_epilogue(void);
void test_matmul(void);
void test_param_block(void);

/* test_cuda_attention.c */
void test_attention(void);
void test_attention_ragged(void);
void test_attention_decode(void);
void test_attention_head(void);
void test_attention_decode_edges(void);

/* test_cuda_backend.c */
void test_model_refuses_moe(void);
void test_model_f32(void);
void test_model_f16(void);
void test_model_switches(void);
void test_model_prompt_tiles(void);
void test_model_attnfuse(void);
void test_model_copies(void);
void test_model_qkvatt(void);
void test_model_atomic(void);
void test_model_fold(void);
void test_model_accum(void);
void test_model_typed(void);
void test_model_atthead(void);
void test_model_atthead_long(void);
void test_model_trig(void);
void test_model_atttrig(void);

/* test_cuda_lora.c */
void test_lora_rebind(void);
void test_model_lora(void);
void test_model_lora_117m(void);

/* test_cuda_quant.c */
void test_quant_matmul(void);
void test_quant_group(void);
void test_quant_get_rows(void);
void test_quant_matmul_refusals(void);
void test_quant_model(void);
void test_quant_speed(void);
void test_quant_deq8_host(void);
void test_qdot_host(void);

/* test_cuda_families.c */
void test_fam_rope(void);
void test_fam_scale_norm(void);
void test_fam_store_ring(void);
void test_fam_attention(void);
void test_fam_decode(void);
void test_fam_models(void);

#endif
