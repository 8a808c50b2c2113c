# Fixtures for the binding's tests: the tools (GPLAN_COMPILE / GPLAN_RUN, else gplan-compile and
# gplan-run on PATH), small Llama and GPT-2 plans compiled from examples/, and the real SmolLM2
# file (GPLAN_SMOLLM2; its tests skip when it is absent).
import os
import pathlib
import shutil
import subprocess

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
# A 2-layer, 64-wide Llama with a 300-token vocabulary, 64 positions and 16 tokens per eval:
# random weights give varied ids (the tiny GPT-2 tends to repeat its last token).
LLAMA_TINY = ["num_hidden_layers=2", "hidden_size=64", "intermediate_size=128",
              "num_attention_heads=4", "num_key_value_heads=2", "vocab_size=300",
              "max_position_embeddings=64", "n_batch=16"]


def _tool(env, name):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        pytest.fail("%s not found: put it on PATH or set %s" % (name, env))
    return path


@pytest.fixture(scope="session")
def gplan_run():
    return _tool("GPLAN_RUN", "gplan-run")


def _compile(tmp_path_factory, graph, defines):
    """A plan of examples/GRAPH.gplan with the -D defines, in the session's temporary folder."""
    out = tmp_path_factory.mktemp("plans") / (graph + "-tiny.plan")
    cmd = [_tool("GPLAN_COMPILE", "gplan-compile"), str(EXAMPLES / (graph + ".gplan")), "-o",
           str(out)]
    for d in defines:
        cmd += ["-D", d]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def llama_plan(tmp_path_factory):
    return _compile(tmp_path_factory, "llama", LLAMA_TINY)

# A 2-layer, 64-wide GPT-2 with the 384-token byte-level BPE of tests/cli/tokenizer/ (which has a
# chat template), 256 positions and 16 tokens per eval: prompts and turns take several evals.
GPT2_TINY = ["n_layer=2", "n_embd=64", "n_head=4", "vocab_size=384", "n_batch=16",
             "n_positions=256"]
TOKENIZER = EXAMPLES.parent / "tests" / "cli" / "tokenizer"
SMOLLM2 = (os.environ.get("GPLAN_SMOLLM2") or
           os.path.expanduser("~/.cache/gplan/SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.fixture(scope="session")
def gpt2_plan(tmp_path_factory):
    return _compile(tmp_path_factory, "gpt2", GPT2_TINY)


@pytest.fixture(scope="session")
def smollm2_path():
    if not os.path.isfile(SMOLLM2):
        pytest.skip("no SmolLM2 file at %s (set GPLAN_SMOLLM2)" % SMOLLM2)
    return SMOLLM2
