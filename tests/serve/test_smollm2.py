"""gplan-serve on the real SmolLM2-135M-Instruct Q4_1 (GPLAN_SMOLLM2, else
/root/.cache/gplan/SmolLM2-135M-Instruct.Q4_1.gguf; exit 77, skipped, when absent): a chat at
temperature 0, the same streamed, a second turn that finds the first in a slot's cache, a long
prompt, and no allocation on the engine thread. Every request may take minutes: the suite runs it
under ASan and UBSan too (a Debug build; the long prompt took over 60 s on a CI machine).
Usage: test_smollm2.py GPLAN_SERVE GPLAN_COMPILE SOURCE_DIR TMP_DIR"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_lib import SKIP, Checks, Server  # noqa: E402

serve, _, _, tmp = sys.argv[1:5]
path = os.environ.get("GPLAN_SMOLLM2") or "/root/.cache/gplan/SmolLM2-135M-Instruct.Q4_1.gguf"
if not os.path.exists(path):
    print("test_smollm2: skipped: no %s" % path)
    sys.exit(SKIP)
os.makedirs(tmp, exist_ok=True)
check = Checks()
T = 400  # seconds a request may take (ctest stops the test at 600)
s = Server(serve, [path, "--ctx", "512", "--threads", "2"], ["--slots", "2"],
           log=os.path.join(tmp, "serve.log"))
try:
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    st, r = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 16, "temperature": 0}, T)
    text = r["choices"][0]["message"]["content"]
    check(st == 200 and "Paris" in text, "chat: %d %r" % (st, r))
    ev = s.stream("/v1/chat/completions", {"messages": msgs, "max_tokens": 16, "stream": True}, T)
    got = "".join(c["choices"][0]["delta"].get("content", "") for c in ev[:-1] if c["choices"])
    check(got == text, "streamed %r, unstreamed %r" % (got, text))
    turn = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": "And Spain?"}]
    st, r = s.post("/v1/chat/completions", {"messages": turn, "max_tokens": 8}, T)
    u = r["usage"]
    check(st == 200 and u["prompt_tokens_details"]["cached_tokens"] >= 20,
          "second turn: cached %r" % u)
    # A long prompt (one eval of ~300 tokens) allocates nothing on the engine thread either.
    st, r = s.post("/v1/completions", {"prompt": "The sky is blue. " * 60, "max_tokens": 4}, T)
    check(st == 200 and r["usage"]["prompt_tokens"] > 250, "long prompt: %d %r" % (st, r))
    m = s.metrics()
    check(not m["gplan_engine_alloc_counting"] or m["gplan_engine_allocations_total"] == 0,
          "allocations on the engine thread: %d" % m["gplan_engine_allocations_total"])
finally:
    check(s.stop() == 0, "exit status")
check.done("test_smollm2")
