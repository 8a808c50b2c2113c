/* Reading GGUF files (versions 2 and 3), llama.cpp's checkpoint format: a header, typed metadata
 * key/value pairs, tensor infos, then the aligned tensor data. The file is memory-mapped read-only;
 * every count, size, string length and offset is checked against the file before it is used.
 * The layout is described field by field in docs/gguf.md. */
#ifndef GP_WEIGHTS_GGUF_H
#define GP_WEIGHTS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "ir/core.h"

/* Metadata value types, numbered as in the file. */
typedef enum {
    GP_GGUF_UINT8 = 0,
    GP_GGUF_INT8 = 1,
    GP_GGUF_UINT16 = 2,
    GP_GGUF_INT16 = 3,
    GP_GGUF_UINT32 = 4,
    GP_GGUF_INT32 = 5,
    GP_GGUF_FLOAT32 = 6,
    GP_GGUF_BOOL = 7,
    GP_GGUF_STRING = 8,
    GP_GGUF_ARRAY = 9,
    GP_GGUF_UINT64 = 10,
    GP_GGUF_INT64 = 11,
    GP_GGUF_FLOAT64 = 12,
    GP_GGUF_TYPE_COUNT
} gp_gguf_type;

/* A string inside the mapped file: len bytes, NOT NUL-terminated, any bytes. */
typedef struct {
    const char *s;
    uint64_t len;
} gp_gguf_str;

/* One tensor info. Dims are in ggml's order: ne[0] is the innermost (contiguous) dim, so a torch
 * Linear weight [out, in] has ne = {in, out}. */
typedef struct {
    const char *name;     /* NUL-terminated copy */
    uint32_t ggml_type;   /* the file's type id (0 F32, 1 F16, 2 Q4_0, ... 30 BF16) */
    int supported;        /* 1 when ggml_type maps to a gp_dtype (f32, f16, bf16, i32, q4_0, q4_1,
                             q5_0, q5_1, q8_0, q4_k, q5_k, q6_k) */
    gp_dtype dtype;       /* meaningful when supported */
    int ndim;             /* 1..4 */
    int64_t ne[GP_MAX_DIMS];
    uint64_t offset;      /* from the start of the data section, a multiple of the alignment */
    const void *data;     /* [nbytes] in the mapping, at offset */
    size_t nbytes;        /* exact size from the type's block size and bytes per block */
} gp_gguf_tensor;

typedef struct gp_gguf gp_gguf;

/* Maps and validates a file. NULL on failure with err set: "PATH: bad GGUF file (REASON)" or
 * "PATH: cannot open (strerror)". */
gp_gguf *gp_gguf_open(const char *path, char *err, size_t errlen);
/* The same over bytes the caller keeps alive until close (fuzzing, tests); name stands for PATH. */
gp_gguf *gp_gguf_open_mem(const void *data, size_t len, const char *name, char *err,
                          size_t errlen);
void gp_gguf_close(gp_gguf *g); /* NULL is a no-op */

const char *gp_gguf_path(const gp_gguf *g);
uint32_t gp_gguf_version(const gp_gguf *g);
uint64_t gp_gguf_alignment(const gp_gguf *g);

/* ---- metadata ---- */
int64_t gp_gguf_kv_count(const gp_gguf *g);
const char *gp_gguf_kv_key(const gp_gguf *g, int64_t i); /* NUL-terminated; NULL out of range */
gp_gguf_type gp_gguf_kv_type(const gp_gguf *g, int64_t i);
int64_t gp_gguf_find(const gp_gguf *g, const char *key); /* index, or -1 when absent */

/* Scalars by key. 0: found and converted; 1: absent; -1: present with a type that does not
 * convert (get_int takes any integer type whose value fits int64, and bool; get_float any integer
 * or float type). */
int gp_gguf_get_int(const gp_gguf *g, const char *key, int64_t *out);
int gp_gguf_get_float(const gp_gguf *g, const char *key, double *out);
int gp_gguf_get_bool(const gp_gguf *g, const char *key, int *out);
int gp_gguf_get_str(const gp_gguf *g, const char *key, gp_gguf_str *out);

/* Arrays by key: element type and count; 0 / 1 absent / -1 not an array. */
int gp_gguf_get_arr(const gp_gguf *g, const char *key, gp_gguf_type *elem, uint64_t *n);
/* Element j of an array as int64 / double / string; 0, or -1 (j out of range, type mismatch). */
int gp_gguf_arr_int(const gp_gguf *g, int64_t kv, uint64_t j, int64_t *out);
int gp_gguf_arr_float(const gp_gguf *g, int64_t kv, uint64_t j, double *out);
int gp_gguf_arr_str(const gp_gguf *g, int64_t kv, uint64_t j, gp_gguf_str *out);
/* The packed little-endian elements of a numeric array (unaligned: read with memcpy); NULL for
 * string arrays. */
const void *gp_gguf_arr_data(const gp_gguf *g, int64_t kv);

/* ---- tensors ---- */
int64_t gp_gguf_tensor_count(const gp_gguf *g);
const gp_gguf_tensor *gp_gguf_tensor_get(const gp_gguf *g, int64_t i); /* file order */
const gp_gguf_tensor *gp_gguf_tensor_find(const gp_gguf *g, const char *name); /* NULL: absent */

/* A metadata value type's name ("uint32", "string", ...), or "unknown". */
const char *gp_gguf_value_type_name(gp_gguf_type t);

/* ggml type id -> name ("q4_0", ...) for messages; "type N" spelled into a static buffer is not
 * thread-safe, so unknown ids give "unknown". */
const char *gp_gguf_type_name(uint32_t ggml_type);

/* ---- name aliases (gguf_names.c) ----
 * A GGUF tensor name and the Hugging Face checkpoint's name for the same tensor, both ways, for
 * the tables gplan knows (docs/gguf.md): arch "gpt2" (blk.3.attn_qkv.weight <->
 * transformer.h.3.attn.c_attn.weight), "gemma2" and "gemma3" (blk.3.ffn_norm.weight <->
 * model.layers.3.pre_feedforward_layernorm.weight), "phi3" (blk.3.attn_qkv.weight <->
 * model.layers.3.self_attn.qkv_proj.weight) and the llama names for any other arch, NULL included
 * (blk.3.attn_q.weight <-> model.layers.3.self_attn.q_proj.weight). Names end in ".weight" or
 * ".bias". The alias goes NUL-terminated into out[n]; 0 on success, -1 when the name has no alias
 * or it does not fit. */
int gp_gguf_name_to_hf(const char *arch, const char *gguf_name, char *out, size_t n);
int gp_gguf_name_from_hf(const char *arch, const char *hf_name, char *out, size_t n);

#endif
