#!/usr/bin/env python3
"""Writes the tiny tokenizer of the gplan-run text tests (tests/cli/gplan_run_text.sh) into this
folder: a byte-level BPE (GPT-2's byte map and pre-tokenizer) of 384 tokens trained by Hugging
Face's `tokenizers` on a fixed English text, with <|endoftext|>, <|im_start|> and <|im_end|> as
special tokens; tokenizer_config.json with a ChatML chat template; generation_config.json with
both end tokens. Run once (pip install tokenizers); the outputs are committed:
    python3 tests/cli/tokenizer/make.py"""
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEXT = """The quick brown fox jumps over the lazy dog. A memory planner places every tensor of a
graph in one arena so that tensors alive at the same time never overlap. Hello, how are you? I am
fine, thank you. The model reads the prompt, then writes one token at a time. Stop here. Once upon
a time there was a small model that wanted to talk. It said hello to the world, and the world said
hello back. Tokens are pieces of text: words, parts of words, spaces and punctuation.
"""

tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=SPECIAL, show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator([TEXT] * 4, trainer=trainer)
tok.save(os.path.join(HERE, "tokenizer.json"))

ids = {s: tok.token_to_id(s) for s in SPECIAL}
config = {
    "add_bos_token": False,
    "add_eos_token": False,
    "bos_token": "<|endoftext|>",
    "eos_token": "<|im_end|>",
    "unk_token": "<|endoftext|>",
    "model_max_length": 64,
    "tokenizer_class": "GPT2Tokenizer",
    # SmolLM2-Instruct's template with a shorter default system prompt.
    "chat_template": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a tiny model<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
}
with open(os.path.join(HERE, "tokenizer_config.json"), "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
with open(os.path.join(HERE, "generation_config.json"), "w") as f:
    json.dump({"bos_token_id": ids["<|endoftext|>"],
               "eos_token_id": [ids["<|endoftext|>"], ids["<|im_end|>"]]}, f, indent=2)
    f.write("\n")
print("vocabulary", tok.get_vocab_size(), "specials", ids)
