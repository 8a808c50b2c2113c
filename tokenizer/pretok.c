/* Pre-tokenizer patterns by GGUF's tokenizer.ggml.pre name: the regular expressions of each
 * model's Hugging Face tokenizer.json (Split pre-tokenizers, isolated matches), in the order they
 * apply. The patterns are the models' own (PCRE2 takes their (?i:...) groups as they are). */
#include <string.h>

#include "tokenizer/tok_impl.h"

#define CONTRACTIONS_GPT2 "'s|'t|'re|'ve|'m|'ll|'d"

const char *const gp_tok_gpt2_pattern =
    CONTRACTIONS_GPT2 "| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

static const char *const gpt2[] = {
    CONTRACTIONS_GPT2 "| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
static const char *const llama3[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const qwen2[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const qwen35[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
};
static const char *const deepseek_coder[] = {
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}",
};
static const char *const deepseek3[] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
     "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
};
static const char *const falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    CONTRACTIONS_GPT2 "| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
};
static const char *const starcoder[] = {
    "\\p{N}",
    CONTRACTIONS_GPT2 "| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
static const char *const gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const bloom[] = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
};
static const char *const viking[] = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
    "\\p{N}",
};
/* What llama.cpp uses for a BPE vocabulary without a known pre-tokenizer name. */
static const char *const fallback[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    CONTRACTIONS_GPT2 "| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};

#define SET(a) a, (int)(sizeof a / sizeof *a)

static const struct {
    const char *names; /* space-separated */
    const char *const *re;
    int n;
    int ignore_merges; /* a word that is itself a token is that token (Llama 3's BPE) */
} table[] = {
    {"gpt-2 gpt2 phi-2 mpt olmo jais trillion granite-docling jina-es jina-de gigachat "
     "jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert jina-v1-en jina-v2-code roberta-bpe "
     "exaone4", SET(gpt2), 0},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano glm4 glm5",
     SET(llama3), 1},
    {"dbrx smaug-bpe chatglm-bpe", SET(llama3), 0},
    {"qwen2 deepseek-r1-qwen kormo f2llmv2 stablelm2 megrez hunyuan", SET(qwen2), 0},
    {"qwen35", SET(qwen35), 0},
    {"deepseek-llm", SET(deepseek_llm), 0},
    {"deepseek-coder", SET(deepseek_coder), 0},
    {"deepseek-v3", SET(deepseek3), 0},
    {"falcon", SET(falcon), 0},
    {"starcoder refact command-r smollm codeshell exaone minerva-7b", SET(starcoder), 0},
    {"gpt-4o llama4", SET(gpt4o), 0},
    {"tekken", SET(tekken), 1},
    {"poro-chat bloom gpt3-finnish", SET(bloom), 0},
    {"viking", SET(viking), 0},
    {"default", SET(fallback), 0},
};

const char *const *gp_tok_pre_patterns(const char *pre, int *n, int *ignore_merges)
{
    if (!pre)
        pre = "default";
    size_t len = strlen(pre);
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        for (const char *p = table[i].names; *p;) {
            const char *e = strchr(p, ' ');
            size_t k = e ? (size_t)(e - p) : strlen(p);
            if (k == len && memcmp(p, pre, len) == 0) {
                *n = table[i].n;
                *ignore_merges = table[i].ignore_merges;
                return table[i].re;
            }
            p += k;
            while (*p == ' ')
                p++;
        }
    }
    return NULL;
}
