"""gplan-serve through the official openai Python client (PyPI's openai, from the venv that
scripts/serve_venv.sh makes; exit 77, skipped, when it cannot be imported): chat and completions,
streamed deltas against the unstreamed text at temperature 0, stop strings, usage, max_tokens and
finish_reason length, the errors the client raises, /v1/models.
Usage: test_openai.py GPLAN_SERVE GPLAN_COMPILE SOURCE_DIR TMP_DIR [VENV]"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from serve_lib import SKIP, Checks, Server, tiny_model  # noqa: E402

try:
    import openai
except ImportError:
    venv_python = os.path.join(sys.argv[5], "bin", "python") if len(sys.argv) > 5 else ""
    if venv_python and os.path.exists(venv_python) and not os.environ.get("GP_SERVE_REEXEC"):
        os.environ["GP_SERVE_REEXEC"] = "1"
        os.execv(venv_python, [venv_python, *sys.argv])
    print("test_openai: skipped: the openai package cannot be imported (scripts/serve_venv.sh "
          "BUILD_DIR installs it)")
    sys.exit(SKIP)

serve, compile_tool, src, tmp = sys.argv[1:5]
check = Checks()
s = Server(serve, tiny_model(compile_tool, src, tmp), ["--slots", "2"])
client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="none", max_retries=0,
                       timeout=60)
msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
try:
    models = client.models.list()
    check([m.id for m in models.data] == ["tiny256.plan"], "models %r" % models)

    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, temperature=0,
                                       extra_body={"ignore_eos": True})
    c = r.choices[0]
    check(r.object == "chat.completion" and c.message.role == "assistant"
          and c.finish_reason == "length", "chat %r" % r)
    check(r.usage.completion_tokens == 12 and r.usage.total_tokens ==
          r.usage.prompt_tokens + 12 and r.usage.prompt_tokens_details.cached_tokens >= 0,
          "usage %r" % r.usage)
    want = c.message.content
    stream = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    parts, finish, usage, roles = [], None, None, []
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            if ch.delta.content:
                parts.append(ch.delta.content)
            finish = ch.finish_reason or finish
    check("".join(parts) == want, "streamed %r, unstreamed %r" % ("".join(parts), want))
    check(roles == ["assistant"] and finish == "length", "roles %r finish %r" % (roles, finish))
    check(usage is not None and usage.completion_tokens == 12, "stream usage %r" % usage)

    r = client.completions.create(model="tiny", prompt="Hello, how are you?", max_tokens=30,
                                  temperature=1.0, seed=3, extra_body={"ignore_eos": True})
    text = r.choices[0].text
    check(r.object == "text_completion" and r.usage.completion_tokens == 30
          and r.choices[0].finish_reason == "length", "completion %r" % r)
    stop = next((text[i:i + 2] for i in range(5, len(text) - 2)
                 if text.find(text[i:i + 2]) == i and "\ufffd" not in text[i:i + 2]), None)
    if check(stop is not None, "a stop string in %r" % text):
        r = client.completions.create(model="tiny", prompt="Hello, how are you?", max_tokens=30,
                                      temperature=1.0, seed=3, stop=[stop],
                                      extra_body={"ignore_eos": True})
        check(r.choices[0].text == text[:text.find(stop)] and r.choices[0].finish_reason == "stop",
              "stop %r: %r" % (stop, r.choices[0]))
        got = "".join(ch.choices[0].text for ch in client.completions.create(
            model="tiny", prompt="Hello, how are you?", max_tokens=30, temperature=1.0, seed=3,
            stop=stop, stream=True, extra_body={"ignore_eos": True}))
        check(got == text[:text.find(stop)], "streamed with stop: %r" % got)

    def refused(fn, status, param=None, code=None):
        try:
            fn()
        except openai.APIStatusError as e:
            body = e.body or {}
            err = body.get("error", body) if isinstance(body, dict) else {}
            check(e.status_code == status and err.get("param") == param
                  and err.get("code") == code, "error %d %r" % (e.status_code, body))
            return
        check(False, "no error (wanted %d %s)" % (status, param))

    refused(lambda: client.chat.completions.create(model="t", messages=[]), 400, "messages")
    refused(lambda: client.chat.completions.create(model="t", messages=msgs, temperature=-1),
            400, "temperature")
    refused(lambda: client.chat.completions.create(model="t", messages=msgs, n=2), 400, "n")
    refused(lambda: client.completions.create(model="t", prompt="a b " * 300), 400, "prompt",
            "context_length_exceeded")
    refused(lambda: client.post("/chat/completions", body=None, cast_to=object,
                                options={"headers": {"Content-Type": "application/json"}}), 400)
finally:
    check(s.stop() == 0, "exit status after SIGTERM")
check.done("test_openai")
