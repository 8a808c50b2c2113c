/* The model families gplan runs, one table (families.c): each family's graph (examples/NAME.gplan,
 * embedded at build time), how a GGUF file or a Hugging Face config.json names it, its default
 * chat format and how gplan-compile --gguf reads its metadata. docs/adding-a-family.md says what
 * a new family needs. */
#ifndef GP_FAMILY_FAMILY_H
#define GP_FAMILY_FAMILY_H

#include <stddef.h>

#include "weights/gguf.h"

struct gp_gguf_params; /* family/gguf_params.h */

/* A test that tells families of one GGUF architecture (or one config.json model_type) apart. */
typedef enum {
    GP_FAMILY_MARK_END,    /* ends a marker list */
    GP_FAMILY_MARK_TENSOR, /* GGUF: the file has a tensor named key */
    GP_FAMILY_MARK_KEY,    /* GGUF: the metadata has key (config.json: the member at key) */
    GP_FAMILY_MARK_STR,    /* the string at key is value */
    GP_FAMILY_MARK_STR_HAS, /* the string at key holds value, ASCII case ignored */
    GP_FAMILY_MARK_POSITIVE /* the integer at key is > 0 (config.json: a number > 0) */
} gp_family_mark_kind;

typedef struct {
    gp_family_mark_kind kind;
    const char *key;   /* a tensor name, a metadata key, or a config.json path ("a.b": b in a) */
    const char *value; /* MARK_STR, MARK_STR_HAS */
} gp_family_marker;

/* One GGUF metadata key (after "ARCH.") and the graph parameter it sets. */
typedef enum {
    GP_KEY_OPTIONAL, /* may be absent (the graph's default is the format's); when present an int
                        >= 0 or a finite float */
    GP_KEY_POSITIVE, /* may be absent; when present > 0 */
    GP_KEY_REQUIRED, /* the model's shape (layers, width, heads): absent, the file is
                        refused; > 0 */
} gp_family_key_need;

typedef struct {
    const char *key;
    const char *param;
    int is_float;
    gp_family_key_need need;
} gp_family_key;

/* How gp_gguf_params_read (family/gguf_params.h) reads one architecture's metadata: the layout
 * of llama.cpp's converter and what its loader assumes where the file is silent, pushed first
 * (the file's keys, pushed after, win); the keys; then what no key says, derived. */
typedef struct {
    int text_keys;               /* reads llama.cpp's TextModel keys (gguf_params.c) before keys */
    const gp_family_key *keys;   /* [n_keys] */
    size_t n_keys;
    const char *const *assumed;  /* "NAME=VALUE", NULL-terminated */
    int (*derive)(const gp_gguf *g, const char *path, const char *arch,
                  struct gp_gguf_params *p, char *err, size_t errlen); /* 0 or -1; NULL: none */
    /* Tensors of its files that a plan may leave unused (NULL-terminated, or NULL): a graph that
     * reads one of two sets, as Phi-3's LongRoPE factors (one set serves the planned context). */
    const char *const *optional_tensors;
} gp_family_gguf;

typedef struct gp_family {
    const char *name;           /* "llama3" */
    const char *graph_file;     /* "llama3.gplan", in examples/ */
    const char *graph_text;     /* [graph_len + 1], the file's text, NUL-terminated */
    size_t graph_len;
    const char *gguf_arch;      /* general.architecture of its GGUF files ("llama") */
    /* Among the families of one gguf_arch: this one when any marker matches (table order); the
     * one with none (NULL) when no other's does. */
    const gp_family_marker *gguf_markers;
    const gp_family_gguf *gguf; /* shared by the families of one gguf_arch */
    const char *hf_model_types; /* config.json model_type values, comma-separated ("gemma3,...") */
    const char *hf_class;       /* transformers class, config.json architectures[0] */
    const gp_family_marker *hf_markers; /* as gguf_markers, among one model_type's families */
    const char *chat_format;    /* a gp_chat_format_name (tokenizer/chat.h), or NULL: none */
    const char *ctx_param;      /* the graph parameter of the context length (KV cache rows) */
} gp_family;

int gp_family_count(void);
const gp_family *gp_family_at(int i); /* 0 <= i < count, else NULL */
const gp_family *gp_family_by_name(const char *name); /* NULL: none */

/* The family of a GGUF architecture when nothing else is known: the one of gguf_arch without
 * markers ("llama" for "llama"); NULL when no family has that architecture. */
const gp_family *gp_family_find(const char *gguf_arch);
/* The family of an open GGUF file: its general.architecture, then the markers. NULL: none. */
const gp_family *gp_family_find_gguf(const gp_gguf *g);

/* The family names, sorted, comma-separated ("gemma2, gemma3, gpt2, ..."): the length of the
 * whole text, of which at most cap bytes are written, NUL-terminated when cap > 0. */
size_t gp_family_list_text(char *buf, size_t cap);

/* The family of a GGUF file. 0, or -1 with err set: gp_gguf_open's message, "PATH: no
 * general.architecture string in the metadata", or "PATH: unsupported architecture 'X'
 * (supported: gemma2, gemma3, gpt2, ...)" (the GGUF architectures, sorted). */
int gp_family_from_gguf(const char *path, const gp_family **out, char *err, size_t n);

/* The family of a Hugging Face config.json: model_type (else architectures[0] against hf_class),
 * then the markers. 0, or -1 with err set: "PATH: cannot read config.json (REASON)", "PATH: no
 * model_type or architectures", or "PATH: unsupported model_type 'X' (supported: gemma2, ...)"
 * (the model types, sorted). */
int gp_family_from_hf_config(const char *config_json_path, const gp_family **out, char *err,
                             size_t n);

#endif
