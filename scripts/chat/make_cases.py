#!/usr/bin/env python3
"""Writes tests/chat/cases.json: real chat templates (as their models ship them in
tokenizer_config.json or GGUF tokenizer.chat_template) rendered by jinja2 the way transformers'
apply_chat_template renders them, for tests/test_chat.c. Run from the repository root:
    python3 scripts/chat/make_cases.py > tests/chat/cases.json
Needs jinja2 only. A case with "expected_by": "gplan" is gplan's documented choice where the
family's own template refuses the input (a system message for Gemma 2 and Mistral v0.1)."""
import json
import sys

import jinja2

TEMPLATES = {
    # HuggingFaceTB/SmolLM2-135M-Instruct (its GGUF's tokenizer.chat_template)
    "smollm2": ("chatml", "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}", "<|im_start|>", "<|im_end|>"),
    # Qwen2 (llama.cpp's ggml-vocab-qwen2.gguf)
    "qwen2": ("chatml", "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}", "<|endoftext|>", "<|im_end|>"),
    # teknium/OpenHermes-2.5-Mistral-7B (ChatML without a default system prompt)
    "openhermes": ("chatml", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", "<s>", "<|im_end|>"),
    # meta-llama/Meta-Llama-3-8B-Instruct
    "llama3": ("llama3", "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}", "<|begin_of_text|>", "<|eot_id|>"),
    # meta-llama/Llama-2-7b-chat-hf
    "llama2": ("llama2", "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}", "<s>", "</s>"),
    # google/gemma-2-2b-it
    "gemma2": ("gemma", "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}", "<bos>", "<eos>"),
    # microsoft/Phi-3-mini-4k-instruct (a later revision, with system messages)
    "phi3": ("phi3", "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}", "<s>", "<|endoftext|>"),
    # Phi-3 as llama.cpp's ggml-vocab-phi-3.gguf has it (BOS first, no system messages)
    "phi3-gguf": ("phi3", "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}", "<s>", "<|endoftext|>"),
    # mistralai/Mistral-7B-Instruct-v0.1
    "mistral": ("mistral", "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}", "<s>", "</s>"),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant"}
CONVERSATIONS = {
    "system": [SYSTEM, {"role": "user", "content": "Hello"},
               {"role": "assistant", "content": "Hi there"},
               {"role": "user", "content": "Who are you"}],
    "spaces": [{"role": "user", "content": "  Hello \n"},
               {"role": "assistant", "content": "   I am an assistant   "},
               {"role": "user", "content": "Another question"}],
    "one": [{"role": "user", "content": "Hi"}],
    "utf8": [{"role": "user", "content": "Grüße, 世界 🙂"}],
}
NO_SYSTEM = {"gemma2", "mistral", "phi3-gguf"}


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def render(tmpl, bos, eos, messages, gen):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # transformers' settings
    env.globals["raise_exception"] = raise_exception
    return env.from_string(tmpl).render(messages=messages, add_generation_prompt=gen,
                                        bos_token=bos, eos_token=eos)


cases = []
for name, (fmt, tmpl, bos, eos) in TEMPLATES.items():
    for conv, messages in CONVERSATIONS.items():
        if conv == "system" and name in NO_SYSTEM:
            continue
        for gen in (True, False):
            if not gen and fmt in ("phi3", "llama2", "mistral"):
                continue  # Phi-3 ends in EOS without it; Llama 2 and Mistral have no such prompt
            cases.append({"name": f"{name}/{conv}/{'gen' if gen else 'nogen'}", "format": fmt,
                          "template": tmpl, "bos": bos, "eos": eos, "messages": messages,
                          "add_generation_prompt": gen,
                          "expected": render(tmpl, bos, eos, messages, gen),
                          "expected_by": "jinja2"})
# gplan's choices where the template refuses a system message.
cases.append({"name": "gemma2/system (gplan: before the first user message)", "format": "gemma",
              "template": TEMPLATES["gemma2"][1], "bos": "<bos>", "eos": "<eos>",
              "messages": CONVERSATIONS["system"], "add_generation_prompt": True,
              "expected": "<bos><start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
                          "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\n"
                          "Who are you<end_of_turn>\n<start_of_turn>model\n",
              "expected_by": "gplan"})
cases.append({"name": "mistral/system (gplan: before the first user message)", "format": "mistral",
              "template": TEMPLATES["mistral"][1], "bos": "<s>", "eos": "</s>",
              "messages": CONVERSATIONS["system"], "add_generation_prompt": True,
              "expected": "<s>[INST] You are a helpful assistant\n\nHello [/INST]Hi there</s>"
                          "[INST] Who are you [/INST]",
              "expected_by": "gplan"})
json.dump({"cases": cases}, sys.stdout, indent=1, ensure_ascii=False)
sys.stdout.write("\n")
