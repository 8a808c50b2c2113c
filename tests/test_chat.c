/* Tests of the chat templates (suite "chat"): the built-in formats against real templates rendered
 * by jinja2 (tests/chat/cases.json, made by scripts/chat/make_cases.py), recognition by markers,
 * unknown templates, turn order, short buffers and no allocation while formatting. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/alloc/alloc_count.h"
#include "tests/testutil.h"
#include "tokenizer/chat.h"

enum { MAX_MSGS = 8 };

static void test_cases(void)
{
    json_error_t jerr;
    json_t *root = json_load_file(gp_test_path("tests/chat/cases.json"), 0, &jerr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    json_t *cases = json_object_get(root, "cases");
    size_t i, n_ok = 0;
    json_t *c;
    static char out[8192];
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *tmpl = json_string_value(json_object_get(c, "template"));
        const char *fmt = json_string_value(json_object_get(c, "format"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        json_t *msgs = json_object_get(c, "messages");
        gp_chat_msg m[MAX_MSGS];
        size_t n = json_array_size(msgs);
        CU_ASSERT_FATAL(n <= MAX_MSGS);
        for (size_t k = 0; k < n; k++) {
            json_t *e = json_array_get(msgs, k);
            m[k].role = json_string_value(json_object_get(e, "role"));
            m[k].content = json_string_value(json_object_get(e, "content"));
        }
        gp_chat_template t;
        char err[512];
        int ok = !gp_chat_detect(tmpl, &t, err, sizeof err) &&
                 !strcmp(gp_chat_format_name(t.format), fmt);
        int64_t len = ok ? gp_chat_apply(&t, m, n,
                                         json_is_true(json_object_get(c, "add_generation_prompt")),
                                         json_string_value(json_object_get(c, "bos")),
                                         json_string_value(json_object_get(c, "eos")), out,
                                         sizeof out, err, sizeof err)
                         : -1;
        ok = ok && len == (int64_t)strlen(want) && !strcmp(out, want);
        if (!ok)
            fprintf(stderr, "\n%s: got\n[%s]\nwant\n[%s]\n", name, len >= 0 ? out : err, want);
        CU_ASSERT_TRUE(ok);
        n_ok += ok;
    }
    CU_ASSERT_EQUAL(n_ok, json_array_size(cases));
    CU_ASSERT(n_ok >= 50);
    json_decref(root);
}

static void test_detect(void)
{
    const struct {
        const char *tmpl, *format;
        int bos;
    } cases[] = {
        {"{{'<|im_start|>' + message['role'] + '\\n'}}", "chatml", 0},
        {"{{ bos_token }}<|start_header_id|>{{ role }}<|end_header_id|>", "llama3", 1},
        {"<start_of_turn>user", "gemma", 0},
        {"{{'<|user|>' + '\\n' + message['content'] + '<|end|>'}}", "phi3", 0},
        {"{{ bos_token + '[INST] <<SYS>>\\n' }}", "llama2", 1},
        {"{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}", "mistral", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_chat_template t;
        char err[256];
        CU_ASSERT_EQUAL_FATAL(gp_chat_detect(cases[i].tmpl, &t, err, sizeof err), 0);
        CU_ASSERT_STRING_EQUAL(gp_chat_format_name(t.format), cases[i].format);
        CU_ASSERT_EQUAL(t.add_bos, cases[i].bos);
        CU_ASSERT_PTR_NULL(t.default_system);
    }
    /* SmolLM2's default system prompt, found in its template. */
    const char *smol = "{% for message in messages %}{% if loop.first and messages[0]['role'] != "
                       "'system' %}{{ '<|im_start|>system\nYou are SmolLM<|im_end|>\n' }}";
    gp_chat_template t;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(gp_chat_detect(smol, &t, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(t.default_system_len, 14);
    CU_ASSERT_EQUAL(memcmp(t.default_system, "You are SmolLM", 14), 0);
    /* A system block that is not a literal (Qwen2.5's, written from the messages) is no default. */
    CU_ASSERT_EQUAL_FATAL(gp_chat_detect("{% if messages[0]['role'] != 'system' %}{{ "
                                         "'<|im_start|>system\\n' + x + '<|im_end|>' }}",
                                         &t, err, sizeof err), 0);
    CU_ASSERT_PTR_NULL(t.default_system);
}

static void test_unknown_and_names(void)
{
    /* Command-R's template (llama.cpp's ggml-vocab-command-r.gguf) is not a built-in family. */
    const char *cmdr = "{{ bos_token }}{% if system_message != false %}{{ "
                       "'<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + system_message + "
                       "'<|END_OF_TURN_TOKEN|>' }}{% endif %}";
    gp_chat_template t;
    char err[256];
    CU_ASSERT_EQUAL(gp_chat_detect(cmdr, &t, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "unknown chat template (none of the markers of chatml, llama3, "
                                "llama2, gemma, phi3, mistral): choose one with --chat-format "
                                "NAME");
    CU_ASSERT_EQUAL(gp_chat_detect("", &t, err, sizeof err), -1);
    for (int f = 0; f < GP_CHAT_COUNT; f++) {
        gp_chat_format g;
        CU_ASSERT_EQUAL(gp_chat_format_parse(gp_chat_format_name((gp_chat_format)f), &g), 0);
        CU_ASSERT_EQUAL(g, f);
        CU_ASSERT_PTR_NOT_NULL(strstr(gp_chat_format_list(), gp_chat_format_name(g)));
    }
    gp_chat_format g;
    CU_ASSERT_EQUAL(gp_chat_format_parse("vicuna", &g), -1);
    CU_ASSERT_EQUAL(gp_chat_format_parse("ChatML", &g), -1);
}

static void test_builtin(void)
{
    /* Without a template: the families' usual BOS texts. */
    const gp_chat_msg m[2] = {{"system", "S"}, {"user", "U"}};
    const struct {
        gp_chat_format f;
        const char *want;
    } cases[] = {
        {GP_CHAT_CHATML, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                         "<|im_start|>assistant\n"},
        {GP_CHAT_LLAMA3, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS"
                         "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {GP_CHAT_LLAMA2, "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]"},
        {GP_CHAT_GEMMA, "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"},
        {GP_CHAT_PHI3, "<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n"},
        {GP_CHAT_MISTRAL, "<s>[INST] S\n\nU [/INST]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_chat_template t = gp_chat_builtin(cases[i].f);
        char out[512], err[256];
        int64_t n = gp_chat_apply(&t, m, 2, 1, NULL, NULL, out, sizeof out, err, sizeof err);
        CU_ASSERT_EQUAL(n, (int64_t)strlen(cases[i].want));
        CU_ASSERT_STRING_EQUAL(out, cases[i].want);
    }
    /* Llama 2 with a system message and an empty first user message: strip() of the whole. */
    const gp_chat_msg e[2] = {{"system", "S "}, {"user", "  "}};
    gp_chat_template t = gp_chat_builtin(GP_CHAT_LLAMA2);
    char out[256], err[256];
    gp_chat_apply(&t, e, 2, 1, NULL, NULL, out, sizeof out, err, sizeof err);
    CU_ASSERT_STRING_EQUAL(out, "<s>[INST] <<SYS>>\nS \n<</SYS>> [/INST]");
}

static void test_errors(void)
{
    char out[256], err[256];
    const gp_chat_msg tool[2] = {{"user", "U"}, {"tool", "T"}};
    gp_chat_template t = gp_chat_builtin(GP_CHAT_CHATML);
    CU_ASSERT_EQUAL(gp_chat_apply(&t, tool, 2, 1, NULL, NULL, out, sizeof out, err, sizeof err),
                    -1);
    CU_ASSERT_STRING_EQUAL(err,
                           "chat: role \"tool\" of message 1 is not system, user or assistant");
    const gp_chat_msg twice[2] = {{"user", "U"}, {"user", "V"}};
    t = gp_chat_builtin(GP_CHAT_LLAMA2);
    CU_ASSERT_EQUAL(gp_chat_apply(&t, twice, 2, 1, NULL, NULL, out, sizeof out, err, sizeof err),
                    -1);
    CU_ASSERT_STRING_EQUAL(err, "chat: llama2 takes an optional system message first, then user "
                                "and assistant messages in turn (message 1 is user)");
    const gp_chat_msg late[3] = {{"user", "U"}, {"assistant", "A"}, {"system", "S"}};
    t = gp_chat_builtin(GP_CHAT_GEMMA);
    CU_ASSERT_EQUAL(gp_chat_apply(&t, late, 3, 1, NULL, NULL, out, sizeof out, err, sizeof err),
                    -1);
    CU_ASSERT_STRING_EQUAL(err, "chat: gemma takes an optional system message first, then user "
                                "and assistant messages in turn (message 2 is system)");
    /* The families without the rule take a system message anywhere. */
    t = gp_chat_builtin(GP_CHAT_PHI3);
    CU_ASSERT(gp_chat_apply(&t, late, 3, 1, NULL, NULL, out, sizeof out, err, sizeof err) > 0);
}

static void test_short_buffer_no_alloc(void)
{
    const gp_chat_msg m[3] = {{"user", "Hello"}, {"assistant", "Hi"}, {"user", "Again"}};
    char full[512], err[256];
    for (int f = 0; f < GP_CHAT_COUNT; f++) {
        gp_chat_template t = gp_chat_builtin((gp_chat_format)f);
        gp_alloc_count_start();
        int64_t n = gp_chat_apply(&t, m, 3, 1, NULL, NULL, full, sizeof full, err, sizeof err);
        char small[9];
        memset(small, 'x', sizeof small);
        int64_t n2 = gp_chat_apply(&t, m, 3, 1, NULL, NULL, small, sizeof small, err, sizeof err);
        int64_t n0 = gp_chat_apply(&t, m, 3, 1, NULL, NULL, NULL, 0, err, sizeof err);
        CU_ASSERT_EQUAL(gp_alloc_count_stop(), 0);
        CU_ASSERT(n > 8);
        CU_ASSERT_EQUAL(n2, n);
        CU_ASSERT_EQUAL(n0, n);
        CU_ASSERT_EQUAL(memcmp(small, full, 8), 0);
        CU_ASSERT_EQUAL(small[8], '\0');
    }
}

void gp_suite_chat(void)
{
    static const gp_test_case tests[] = {
        {"formats equal real templates rendered by jinja2", test_cases},
        {"families recognized by their markers", test_detect},
        {"unknown templates and format names", test_unknown_and_names},
        {"built-in formats without a template", test_builtin},
        {"roles and turn order", test_errors},
        {"short buffers, no allocation", test_short_buffer_no_alloc},
    };
    gp_test_add_suite("chat", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
