# Fixtures for the binding's tests: the tools (GPLAN_COMPILE / GPLAN_RUN, else gplan-compile and
# gplan-run on PATH) and a small Llama plan compiled from examples/llama.gplan.
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


@pytest.fixture(scope="session")
def llama_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("plans") / "llama-tiny.plan"
    cmd = [_tool("GPLAN_COMPILE", "gplan-compile"), str(EXAMPLES / "llama.gplan"), "-o", str(out)]
    for d in LLAMA_TINY:
        cmd += ["-D", d]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out
