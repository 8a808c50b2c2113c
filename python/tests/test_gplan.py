# The binding against the C library and gplan-run: generated ids and logits bit for bit, outputs
# as numpy arrays and lists, and errors carrying the library's messages.
import struct
import subprocess

import pytest

import gplan


def run_ids(gplan_run, plan, seed, prompt, n):
    """What gplan-run prints for a greedy run (1 thread, the CPU backend)."""
    r = subprocess.run([gplan_run, str(plan), "--random-weights", str(seed), "-n", str(n),
                        "--threads", "1", "--prompt-ids", ",".join(map(str, prompt))],
                       check=True, capture_output=True, text=True)
    return [int(t) for t in r.stdout.split()]


@pytest.fixture
def model(llama_plan):
    with gplan.Model(llama_plan).random_weights(3) as m:
        yield m


def test_info_and_dims(model):
    info = model.info
    assert (info["vocab"], info["context"], info["max_tokens"]) == (300, 64, 16)
    assert info["tokens"] and info["positions"] and info["logits"]
    assert model.dims == [(info["tokens_dim"], 16), (info["rows_dim"], 16)]
    assert (info["rows"], info["max_rows"]) == ("rows", 16)


def test_rows_pick_the_logits(model):
    # Every row, then a subset in another order: the same bytes as the matching rows of the first.
    s = gplan.Session(model)
    s.set_tokens([4, 5, 6, 7])
    s.set_rows()
    s.eval()
    every = s.output("logits")
    assert every.shape == (4, 300)
    s.reset()
    s.set_tokens([4, 5, 6, 7])
    s.set_rows([3, 0, 3])
    s.eval()
    some = s.output("logits")
    assert some.shape == (3, 300)
    assert [r.tobytes() for r in some] == [every[i].tobytes() for i in (3, 0, 3)]
    s.reset()
    s.set_tokens([4, 5, 6, 7])
    s.set_rows([4])  # not a token of this eval
    with pytest.raises(gplan.Error, match="rows"):
        s.eval()


@pytest.mark.parametrize("seed,prompt,n", [(1, [1, 2, 3], 10), (2, [7], 12),
                                           (3, list(range(40, 60)), 8),  # two prompt evals
                                           (4, list(range(1, 61)), 10)])  # stops at the context
def test_generate_matches_gplan_run(llama_plan, gplan_run, seed, prompt, n):
    expected = run_ids(gplan_run, llama_plan, seed, prompt, n)
    with gplan.Model(llama_plan).random_weights(seed) as m:
        s = gplan.Session(m, backend="cpu", threads=1)
        got = s.generate(prompt, n)
        assert got == expected
        assert len(got) == (min(n, 64 - len(prompt) + 1))
        assert s.generate(prompt, n) == got  # generate starts a new sequence each time


def test_seeds_differ(llama_plan, gplan_run):
    # The comparisons above can fail: different weights give different ids.
    with gplan.Model(llama_plan).random_weights(1) as a, gplan.Model(llama_plan).random_weights(2) as b:
        ga = gplan.Session(a).generate([1, 2, 3], 10)
        gb = gplan.Session(b).generate([1, 2, 3], 10)
    assert ga != gb and len(set(ga)) > 1


def test_logits_bit_for_bit(model, llama_plan, gplan_run, tmp_path):
    # Two sessions (1 and 2 threads; the last row only, every row) and gplan-run --logits-out: the
    # same bytes, eval by eval.
    logits_file = tmp_path / "logits.f32"
    subprocess.run([gplan_run, str(llama_plan), "--random-weights", "3", "-n", "4", "--threads", "1",
                    "--prompt-ids", "5,6,7", "--logits-out", str(logits_file)], check=True,
                   capture_output=True)
    rows = logits_file.read_bytes()
    vocab = model.info["vocab"]
    assert len(rows) == 4 * vocab * 4
    s1 = gplan.Session(model, threads=1)
    s2 = gplan.Session(model, threads=2)
    feed, start, got = [5, 6, 7], 0, b""
    for step in range(4):
        outs = []
        for s in (s1, s2):
            s.set_tokens(feed, start=start)
            if s is s2:
                s.set_rows()
            s.eval()
            outs.append(s.output("logits"))
        a, b = outs
        assert a.shape == (1, vocab) and a.dtype.name == "float32"
        assert b.shape == (len(feed), vocab)
        assert a[-1].tobytes() == b[-1].tobytes()
        got += a[-1].tobytes()
        start += len(feed)
        feed = [int(a[-1].argmax())]
    assert got == rows
    assert s1.eval_count == 4 and s1.backend == "cpu"


def test_output_as_list(model):
    s = gplan.Session(model)
    s.set_tokens([1, 2])
    s.set_rows()
    s.eval()
    arr = s.output("logits")
    lst = s.output("logits", numpy=False)
    assert len(lst) == 2 and all(len(r) == 300 for r in lst)
    assert struct.pack("<600f", *(x for r in lst for x in r)) == arr.tobytes()


def test_reset_restarts_the_sequence(model):
    s = gplan.Session(model)
    s.set_tokens([9, 8])
    s.eval()
    first = s.output("logits").tobytes()
    s.set_tokens([9, 8], start=2)
    s.eval()
    assert s.output("logits").tobytes() != first  # the KV cache holds the first two
    s.reset()
    s.set_tokens([9, 8])
    s.eval()
    assert s.output("logits").tobytes() == first


def test_errors_carry_the_library_message(model, llama_plan, tmp_path):
    with pytest.raises(gplan.Error, match="missing.plan"):
        gplan.Model(tmp_path / "missing.plan")
    junk = tmp_path / "junk.plan"
    junk.write_bytes(b"not a plan")
    with pytest.raises(gplan.Error, match="junk.plan: bad plan file"):
        gplan.Model(junk)
    with pytest.raises(gplan.Error, match='unknown backend "tpu"'):
        gplan.Session(model, backend="tpu")
    with gplan.Model(llama_plan) as m:
        with pytest.raises(gplan.Error, match="missing.safetensors"):
            m.bind_weights(tmp_path / "missing.safetensors")
    s = gplan.Session(model)
    s.set_tokens([1, 300])
    with pytest.raises(gplan.Error, match=r"ids\[1\] = 300 is out of range \[0, 300\)"):
        s.eval()
    with pytest.raises(gplan.Error, match="no output named 'nope'"):
        s.output("nope")
    with pytest.raises(gplan.Error, match="the prompt has 65 tokens"):
        s.generate(list(range(65)), 1)
    s.close()
    with pytest.raises(gplan.Error, match="closed"):
        s.eval()


def test_close_frees_sessions_first(llama_plan):
    m = gplan.Model(llama_plan).random_weights(1)
    s = gplan.Session(m)
    m.close()
    with pytest.raises(gplan.Error, match="closed"):
        s.eval()
    assert gplan.library_path()
