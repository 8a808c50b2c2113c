/* Chat templates: the common families built in (ChatML, Llama 3, Llama 2, Gemma, Phi-3, Mistral),
 * recognized from the Jinja template text a model ships (GGUF tokenizer.chat_template or
 * tokenizer_config.json's chat_template) by their markers; no Jinja engine. Formatting writes into
 * the caller's buffer and allocates nothing. docs/chat.md says what each family writes. */
#ifndef GP_TOKENIZER_CHAT_H
#define GP_TOKENIZER_CHAT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    GP_CHAT_CHATML,  /* <|im_start|>role\n...<|im_end|>\n (Qwen, SmolLM, OpenHermes, ...) */
    GP_CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    GP_CHAT_LLAMA2,  /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> */
    GP_CHAT_GEMMA,   /* <start_of_turn>user\n...<end_of_turn>\n, the assistant as "model" */
    GP_CHAT_PHI3,    /* <|user|>\n...<|end|>\n<|assistant|>\n */
    GP_CHAT_MISTRAL, /* <s>[INST] ... [/INST]...</s> (Mistral 7B Instruct v0.1/v0.2) */
    GP_CHAT_COUNT
} gp_chat_format;

typedef struct {
    const char *role; /* "system", "user" or "assistant" */
    const char *content;
} gp_chat_msg;

/* A family plus what the model's own template varies within it. */
typedef struct {
    gp_chat_format format;
    int add_bos;                /* the text starts with the BOS token's text (bos_token) */
    const char *default_system; /* a system prompt the template adds when the messages have none
                                   (ChatML templates such as SmolLM2's), or NULL; points into the
                                   template text, default_system_len bytes */
    size_t default_system_len;
} gp_chat_template;

/* "chatml", "llama3", "llama2", "gemma", "phi3", "mistral". */
const char *gp_chat_format_name(gp_chat_format f);
/* The names, comma-separated, for messages and help. */
const char *gp_chat_format_list(void);
/* 0 and *out for a name of gp_chat_format_name, else -1. */
int gp_chat_format_parse(const char *name, gp_chat_format *out);

/* The family as its best-known model's template has it (BOS where that template writes it, no
 * default system prompt). */
gp_chat_template gp_chat_builtin(gp_chat_format f);

/* Recognizes a template's family from its text. 0, or -1 with err:
 * "unknown chat template (none of the markers of chatml, llama3, ...): choose one with
 * --chat-format NAME". The result may point into tmpl (the default system prompt). */
int gp_chat_detect(const char *tmpl, gp_chat_template *out, char *err, size_t err_len);

/* Formats messages[n] and, when add_generation_prompt, the start of the assistant's reply.
 * bos, eos: the vocabulary's BOS/EOS texts (NULL: the family's usual ones). The text holds the
 * special tokens as text: encode it with their texts parsed as special and no BOS/EOS added (HF's
 * apply_chat_template does the same). Returns the length of the whole text (it may exceed cap:
 * call again with more), writing at most cap bytes, NUL-terminated when cap > 0; -1 with err for a
 * role the family does not take or messages out of the order it needs. */
int64_t gp_chat_apply(const gp_chat_template *t, const gp_chat_msg *messages, size_t n,
                      int add_generation_prompt, const char *bos, const char *eos, char *out,
                      size_t cap, char *err, size_t err_len);

#endif
