# The text API (gplan.Model over <gplan/text.h>): a tiny random-weights GPT-2 with a 384-token BPE
# for determinism, stop strings, counts, streams, chat caching and errors; the real SmolLM2 file
# (skipped when absent) for text that means something.
import ctypes
import os
import shutil
import subprocess

import pytest

import gplan
from conftest import TOKENIZER

PROMPT = "Hello, how are you?"
UNICODE = "Grüße, 世界 🙂 and <|im_end|> more"


@pytest.fixture
def tiny(gpt2_plan):
    with gplan.Model(None, plan=gpt2_plan, tokenizer=TOKENIZER, random_weights=4, threads=1) as m:
        yield m


def tiny_model(plan, seed=4):
    return gplan.Model(None, plan=plan, tokenizer=TOKENIZER, random_weights=seed, threads=1)


# ---- the C structs ----

def test_struct_defaults():
    lib = gplan._load()
    o = lib.gp_lm_defaults()
    assert [getattr(o, f) for f, _ in gplan._LmOpts._fields_ if f != "defines"] == \
        [None, None, 0, 0, 0, None, None, 0, 0, 0, 0, 0, 0, 0, None, None, None, 1.0, 0]
    so = lib.gp_sampler_defaults()
    assert (so.temp, so.top_k, so.top_p, so.min_p, so.repeat_penalty, so.repeat_last_n,
            so.seed) == (0.0, 0, 1.0, 0.0, 1.0, 64, 1)
    g = lib.gp_gen_defaults()
    assert (g.max_tokens, g.n_stop, g.ignore_eos, g.eos, bool(g.on_text), g.user, g.restart) == \
        (16, 0, 0, -1, False, None, 0)


def _include_dirs():
    dirs = [d for d in os.environ.get("GPLAN_INCLUDE", "").split(os.pathsep) if d]
    return dirs if any(os.path.isfile(os.path.join(d, "gplan", "text.h")) for d in dirs) else None


def test_struct_layouts_match_text_h(tmp_path):
    # Every field's offset and size and every struct's size, from the C compiler and ctypes.
    cc, dirs = shutil.which("cc"), _include_dirs()
    if not cc or not dirs:
        pytest.skip("needs cc and GPLAN_INCLUDE (folders holding gplan/text.h, gplan_version.h)")
    structs = {"gp_lm_opts": gplan._LmOpts, "gp_sampler_opts": gplan._SamplerOpts,
               "gp_gen_opts": gplan._GenOpts, "gp_gen_result": gplan._GenResult,
               "gp_msg": gplan._Msg}
    lines, want = [], []
    for name, t in structs.items():
        lines.append('printf("%%zu\\n", sizeof(%s));' % name)
        want.append(ctypes.sizeof(t))
        for field, _ in t._fields_:
            lines.append('printf("%%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                         % (name, field, name, field))
            want += [getattr(t, field).offset, getattr(t, field).size]
    src = tmp_path / "layout.c"
    src.write_text("#include <stddef.h>\n#include <stdio.h>\n#include <gplan/text.h>\n"
                   "int main(void)\n{\n%s\nreturn 0;\n}\n" % "\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", str(src), "-o", str(exe)] +
                   ["-I" + d for d in dirs] + ["-I" + os.path.join(d, "gplan") for d in dirs],
                   check=True)
    got = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True,
                                          text=True).stdout.split()]
    assert got == want


# ---- loading ----

def test_loads_a_plan_with_random_weights(gpt2_plan, gplan_run):
    a = tiny_model(gpt2_plan)
    b = gplan.Model("", plan=gpt2_plan, tokenizer=TOKENIZER, random_weights=4, threads=1)
    c = gplan.Model(gpt2_plan, tokenizer=TOKENIZER, random_weights=4, threads=1)
    for m in (a, b, c):
        assert (m.context, m.vocab, m.arch, m.plan_path) == (256, 384, "", str(gpt2_plan))
        assert m.info["max_tokens"] == 16
    texts = [m.generate(PROMPT, max_tokens=24, ignore_eos=True) for m in (a, b, c)]
    assert texts[0] and texts == [texts[0]] * 3
    # A plan file alone is the session API's model, as before the text API.
    with gplan.Model(gpt2_plan) as p:
        assert (p.context, p.vocab, p.arch, p.plan_path) == (256, 384, "", str(gpt2_plan))
        with pytest.raises(gplan.Error, match="a plan without the text API"):
            p.generate(PROMPT)
        with pytest.raises(gplan.Error, match="a plan without the text API"):
            p.tokenize(PROMPT)


def test_session_api_on_a_text_model(tiny):
    # The text model's plan and weights run token ids too: the same ids as its greedy text.
    text = tiny.generate(PROMPT, max_tokens=24, ignore_eos=True)
    s = gplan.Session(tiny, threads=1)
    ids = s.generate(tiny.tokenize(PROMPT), 24)
    assert len(ids) == 24 and tiny.detokenize(ids) == text
    with pytest.raises(gplan.Error, match="binds its weights when it loads"):
        tiny.random_weights(1)
    with pytest.raises(gplan.Error, match="binds its weights when it loads"):
        tiny.bind_weights("x.safetensors")
    tiny.close()
    with pytest.raises(gplan.Error, match="closed"):
        s.eval()  # the model closed its sessions first
    with pytest.raises(gplan.Error, match="closed"):
        tiny.generate(PROMPT)


def test_load_errors(gpt2_plan, tmp_path):
    with pytest.raises(gplan.Error, match="no model given"):
        gplan.Model(None)
    with pytest.raises(gplan.Error, match="no weights: give a checkpoint or random weights"):
        gplan.Model(None, plan=gpt2_plan, tokenizer=TOKENIZER)
    with pytest.raises(gplan.Error, match="negative context"):
        gplan.Model(None, plan=gpt2_plan, random_weights=1, context=-1)
    with pytest.raises(gplan.Error, match="random_weights: the seed must be in"):
        gplan.Model(None, plan=gpt2_plan, random_weights=-1)
    with pytest.raises(gplan.Error, match="unknown chat format: nope .formats: chatml"):
        gplan.Model(None, plan=gpt2_plan, tokenizer=TOKENIZER, random_weights=1,
                    chat_format="nope")
    (tmp_path / "folder").mkdir()
    with pytest.raises(gplan.Error, match="a folder without config.json"):
        gplan.Model(tmp_path / "folder")
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises(gplan.Error, match="fake.gguf"):
        gplan.Model(fake)
    m = gplan.Model(None, plan=gpt2_plan, tokenizer=TOKENIZER, random_weights=1,
                    backend="tpu")
    with pytest.raises(gplan.Error, match='unknown backend "tpu"'):
        m.generate(PROMPT)  # the sequence's session is made at the first generation
    assert "chatml" in gplan.chat_formats()


# ---- tokens ----

def test_tokenize_round_trip(tiny):
    ids = tiny.tokenize(UNICODE)
    assert all(0 <= i < 384 for i in ids) and len(ids) > 10
    assert tiny.detokenize(ids) == UNICODE
    assert 2 in ids  # <|im_end|>'s text is its id
    assert tiny.tokenize("<|im_end|>", add_special=False) == [2]
    assert tiny.tokenize("") == [] and tiny.detokenize([]) == ""
    with pytest.raises(gplan.Error, match="tokenize: invalid UTF-8 at byte 3"):
        tiny.tokenize(b"abc\xff")
    with pytest.raises(gplan.Error, match=r"ids\[1\] = 384 is outside the tokenizer's vocabulary"):
        tiny.detokenize([5, 384])
    with pytest.raises(gplan.Error, match=r"ids\[0\] = -1 is outside"):
        tiny.detokenize([-1])


def test_no_tokenizer(gpt2_plan):
    with gplan.Model(None, plan=gpt2_plan, tokenizer="", random_weights=1) as m:
        with pytest.raises(gplan.Error, match="the model has no tokenizer"):
            m.generate(PROMPT)
        with pytest.raises(gplan.Error, match="no tokenizer"):
            m.tokenize(PROMPT)


# ---- generating ----

def test_greedy_is_deterministic(gpt2_plan):
    a, b, c = tiny_model(gpt2_plan), tiny_model(gpt2_plan), tiny_model(gpt2_plan, seed=3)
    ta = a.generate(PROMPT, max_tokens=24, ignore_eos=True)
    assert b.generate(PROMPT, max_tokens=24, ignore_eos=True) == ta
    assert a.generate(PROMPT, max_tokens=24, ignore_eos=True) == ta  # the cached prefix
    assert a.last_result.cached_tokens == a.last_result.prompt_tokens - 1
    assert c.generate(PROMPT, max_tokens=24, ignore_eos=True) != ta  # other weights


def test_seeded_sampling_repeats(tiny):
    opts = dict(max_tokens=24, ignore_eos=True, temperature=1.0, top_k=50, top_p=0.95)
    first = tiny.generate(PROMPT, seed=5, **opts)
    tiny.generate("Something else entirely", max_tokens=4)  # the cache holds another prompt
    assert tiny.generate(PROMPT, seed=5, **opts) == first
    others = {tiny.generate(PROMPT, seed=s, **opts) for s in (6, 7, 8)}
    assert others - {first}
    assert tiny.generate(PROMPT, max_tokens=24, ignore_eos=True) != first  # greedy again


@pytest.mark.parametrize("n", [0, 1, 5, 17])
def test_max_tokens(tiny, n):
    text = tiny.generate(PROMPT, max_tokens=n, ignore_eos=True)
    r = tiny.last_result
    assert (r.finish, r.completion_tokens, r.prompt_tokens) == ("length", n, 8)
    assert r.gen_evals == max(n - 1, 0) and r.prompt_evals == 1
    assert (text == "") == (n == 0)


def test_until_the_context_is_full(tiny):
    tiny.generate(PROMPT, max_tokens=None, ignore_eos=True)
    r = tiny.last_result
    # The last token is picked at the 256th position and emitted, with no room to evaluate it.
    assert (r.finish, r.prompt_tokens, r.completion_tokens) == ("context", 8, 256 - 8 + 1)


def test_stop_strings(tiny):
    opts = dict(max_tokens=32, ignore_eos=True, temperature=1.0, seed=5)
    full = tiny.generate(PROMPT, **opts)
    # A printable two-character stop from the middle of the text: the text is cut before its
    # first occurrence.
    stop = next(full[i:i + 2] for i in range(4, len(full) - 1)
                if full[i:i + 2].isascii() and full[i:i + 2].isprintable())
    cut = tiny.generate(PROMPT, stop=stop, **opts)
    assert cut == full[:full.index(stop)] and len(cut) < len(full)
    r = tiny.last_result
    assert r.finish == "stop" and r.completion_tokens < 32
    assert tiny.generate(PROMPT, stop=["\x01never", stop], **opts) == cut
    assert "".join(tiny.generate(PROMPT, stop=stop, stream=True, **opts)) == cut
    assert tiny.generate(PROMPT, stop="\x01never", **opts) == full


def test_stream_equals_the_text(tiny):
    for opts in (dict(), dict(temperature=1.0, seed=9)):
        text = tiny.generate(UNICODE, max_tokens=40, ignore_eos=True, **opts)
        stream = tiny.generate(UNICODE, max_tokens=40, ignore_eos=True, stream=True, **opts)
        pieces = list(stream)
        assert len(pieces) > 1 and all(pieces) and "".join(pieces) == text
        assert tiny.last_result.finish == "length"
        assert list(stream) == []


def test_stream_closed_early_leaves_the_model_usable(gpt2_plan, tiny):
    want = tiny_model(gpt2_plan).generate(PROMPT, max_tokens=24, ignore_eos=True)
    stream = tiny.generate(PROMPT, max_tokens=24, ignore_eos=True, stream=True)
    assert tiny.last_result.completion_tokens == 0  # lazy: the prompt only
    first = next(stream)
    assert want.startswith(first)
    stream.close()
    assert tiny.last_result.finish == "cancel"
    assert list(stream) == []
    assert tiny.generate(PROMPT, max_tokens=24, ignore_eos=True) == want
    # A new call ends an unfinished stream, whose next step then raises.
    stream = tiny.generate(PROMPT, max_tokens=24, ignore_eos=True, stream=True)
    next(stream)
    assert tiny.generate(PROMPT, max_tokens=24, ignore_eos=True) == want
    with pytest.raises(gplan.Error, match="ended by a later call"):
        next(stream)
    with tiny.generate(PROMPT, max_tokens=24, ignore_eos=True, stream=True) as stream:
        next(stream)
    assert tiny.last_result.finish == "cancel"


@pytest.mark.parametrize("opts,message", [
    (dict(temperature=-1), "temperature must be a number >= 0"),
    (dict(temperature=float("nan")), "temperature must be a number >= 0"),
    (dict(top_k=-1), "top-k must be >= 0"),
    (dict(top_p=0), r"top-p must be in \(0, 1\]"),
    (dict(top_p=1.5), r"top-p must be in \(0, 1\]"),
    (dict(min_p=2), r"min-p must be in \[0, 1\]"),
    (dict(repeat_penalty=0), "repeat penalty must be a number > 0"),
    (dict(repeat_last_n=-1), "repeat-last-n must be in"),
    (dict(seed=-1), "the seed must be in"),
    (dict(stop=""), "a stop string is empty or longer than 256 bytes"),
    (dict(stop="x" * 257), "a stop string is empty or longer than 256 bytes"),
    (dict(stop=["s%d" % i for i in range(17)]), "more than 16 stop strings"),
])
def test_bad_options_raise(tiny, opts, message):
    with pytest.raises(gplan.Error, match="generate: .*" + message):
        tiny.generate(PROMPT, **opts)
    with pytest.raises(gplan.Error, match="chat: .*" + message):
        tiny.chat([{"role": "user", "content": "Hi"}], **opts)
    assert tiny.generate(PROMPT, max_tokens=3, ignore_eos=True)  # still usable


def test_context_overflow(tiny):
    want = tiny.generate(PROMPT, max_tokens=8, ignore_eos=True)
    long = "word " * 200
    n = len(tiny.tokenize(long))
    assert n > 256
    msg = "the prompt has %d tokens, more than the planned context of 256 positions" % n
    with pytest.raises(gplan.ContextError, match=msg):
        tiny.generate(long)
    assert tiny.last_result.prompt_tokens == n
    with pytest.raises(gplan.ContextError, match=r"with a position for the reply"):
        tiny.chat([{"role": "user", "content": long}])
    with pytest.raises(gplan.Error, match="the prompt is empty"):
        tiny.generate("")
    # The sequence is unchanged: the prompt before is still cached.
    assert tiny.generate(PROMPT, max_tokens=8, ignore_eos=True) == want
    assert tiny.last_result.cached_tokens == 7


# ---- chat ----

def test_chat_reuses_the_cache(gpt2_plan, tiny):
    msgs = [{"role": "user", "content": "Hi there"}]
    assert tiny.format_chat(msgs) == ("<|im_start|>system\nYou are a tiny model<|im_end|>\n"
                                      "<|im_start|>user\nHi there<|im_end|>\n"
                                      "<|im_start|>assistant\n")
    reply = tiny.chat(msgs, max_tokens=10, ignore_eos=True)
    first = tiny.last_result
    assert reply and first.completion_tokens == 10 and first.cached_tokens == 0
    assert first.prompt_tokens == len(tiny.tokenize(tiny.format_chat(msgs), add_special=False))
    msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]
    second_reply = tiny.chat(msgs, max_tokens=10, ignore_eos=True)
    second = tiny.last_result
    # The first turn's prompt and reply are cached: only the new messages are evaluated.
    assert second.cached_tokens == first.prompt_tokens + first.completion_tokens
    assert second.prompt_rows == second.prompt_tokens - second.cached_tokens
    # A fresh model formats the same conversation to the same reply.
    assert tiny_model(gpt2_plan).chat(msgs, max_tokens=10, ignore_eos=True) == second_reply
    assert "".join(tiny.chat(msgs, max_tokens=10, ignore_eos=True, stream=True)) == second_reply
    with pytest.raises(gplan.Error, match="message 0: not a"):
        tiny.chat([{"role": "user"}])
    with pytest.raises(gplan.Error, match="chat: .*role"):
        tiny.chat([{"role": "robot", "content": "beep"}])


# ---- the real model ----

@pytest.fixture(scope="module")
def smollm2(smollm2_path, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    with gplan.Model(smollm2_path, cache_dir=cache, threads=2) as m:
        yield m


def test_smollm2_paris(smollm2, smollm2_path):
    prompt = "The capital of France is"
    text = smollm2.generate(prompt, max_tokens=8)
    assert "Paris" in text
    r = smollm2.last_result
    assert (r.finish, r.completion_tokens) == ("length", 8)
    assert r.prompt_tokens == len(smollm2.tokenize(prompt))
    assert (smollm2.arch, smollm2.vocab, smollm2.context) == ("llama", 49152, 4096)
    assert os.path.isfile(smollm2.plan_path)
    # A second load finds the plan in the cache.
    with gplan.Model(smollm2_path, cache_dir=os.path.dirname(os.path.dirname(smollm2.plan_path)),
                     threads=1) as again:
        assert again.plan_path == smollm2.plan_path


def test_smollm2_stream_and_stop(smollm2):
    prompt = "The capital of France is"
    text = smollm2.generate(prompt, max_tokens=8)
    pieces = list(smollm2.generate(prompt, max_tokens=8, stream=True))
    assert len(pieces) > 1 and "".join(pieces) == text
    # "s." spans the tokens " Paris" and ".": the stream holds " Pari" back until it knows.
    assert text.startswith(" Paris.")
    for stop in ("s.", ["\n", "."], "Paris"):
        first = min(text.index(s) for s in ([stop] if isinstance(stop, str) else stop))
        assert smollm2.generate(prompt, max_tokens=8, stop=stop) == text[:first]
        assert smollm2.last_result.finish == "stop"
        assert "".join(smollm2.generate(prompt, max_tokens=8, stop=stop, stream=True)) == \
            text[:first]


def test_smollm2_seeded_sampling(smollm2):
    prompt = "Once upon a time"
    opts = dict(max_tokens=16, temperature=0.8, top_p=0.95, min_p=0.05, repeat_penalty=1.1)
    a = smollm2.generate(prompt, seed=11, **opts)
    smollm2.generate("Something else", max_tokens=2)
    assert smollm2.generate(prompt, seed=11, **opts) == a
    assert {smollm2.generate(prompt, seed=s, **opts) for s in (12, 13, 14)} - {a}


def test_smollm2_tokenize(smollm2):
    assert smollm2.tokenize("Hello world") == [19556, 905]
    assert smollm2.tokenize("<|im_end|>", add_special=False) == [2]
    assert smollm2.detokenize(smollm2.tokenize(UNICODE)) == UNICODE


def test_smollm2_chat(smollm2):
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    reply = smollm2.chat(msgs, max_tokens=64)
    first = smollm2.last_result
    assert "Paris" in reply and first.finish == "stop"
    assert "".join(smollm2.chat(msgs, max_tokens=64, stream=True)) == reply
    msgs += [{"role": "assistant", "content": reply},
             {"role": "user", "content": "And of Germany?"}]
    second = smollm2.chat(msgs, max_tokens=64)
    r = smollm2.last_result
    assert "Berlin" in second
    # The reply as returned continues the cached text: the whole first turn is reused.
    assert r.cached_tokens == first.prompt_tokens + first.completion_tokens
    assert r.prompt_rows == r.prompt_tokens - r.cached_tokens


def test_smollm2_context_overflow(smollm2_path, tmp_path):
    with gplan.Model(smollm2_path, context=64, cache_dir=tmp_path, threads=2) as m:
        assert m.context == 64
        with pytest.raises(gplan.ContextError, match="more than the planned context of 64 positions"):
            m.generate("word " * 100)
        with pytest.raises(gplan.ContextError, match="with a position for the reply"):
            m.chat([{"role": "user", "content": "word " * 60}])
        assert "Paris" in m.generate("The capital of France is", max_tokens=4)


def test_smollm2_memory_budget(smollm2_path, tmp_path):
    # A budget with no context: the largest context that fits, below the default's 4096 here.
    with gplan.Model(smollm2_path, memory=200 << 20, cache_dir=tmp_path, threads=2) as m:
        assert 1 <= m.context < 4096
        fitted = m.context
        assert "Paris" in m.generate("The capital of France is", max_tokens=4)
    with pytest.raises(gplan.Error, match="a context of %d positions needs" % (fitted + 1)):
        gplan.Model(smollm2_path, memory=200 << 20, context=fitted + 1, cache_dir=tmp_path)
    with pytest.raises(gplan.Error, match="over the budget of 1.00 MiB"):
        gplan.Model(smollm2_path, memory=1 << 20, cache_dir=tmp_path)
