"""gplan-serve over loopback with the standard library alone: the endpoints' shapes, streaming
against the unstreamed text, stop strings, usage, logprobs, the prefix cache, every error, raw
sockets (malformed, truncated, deeply nested, wrong Content-Length, 10 MiB bodies), a full queue,
8 of 16 streams killed mid-generation, many mixed requests with no allocation on the engine
thread and flat RSS, fds and threads, and SIGTERM's drain.
Usage: test_serve.py GPLAN_SERVE GPLAN_COMPILE SOURCE_DIR TMP_DIR [N_MIXED]"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_lib import Checks, Server, raw, tiny_model  # noqa: E402

serve, compile_tool, src, tmp = sys.argv[1:5]
n_mixed = int(sys.argv[5]) if len(sys.argv) > 5 else int(os.environ.get("GPLAN_SERVE_MIXED", 200))
check = Checks()
model = tiny_model(compile_tool, src, tmp)
CHAT, COMP = "/v1/chat/completions", "/v1/completions"
USER = [{"role": "user", "content": "Hello, how are you?"}]

# Usage errors (exit status 2, the message on stderr) before anything is loaded or listened on.
magic = os.path.join(tmp, "magic.gguf")  # a model by its magic: options are checked first
with open(magic, "wb") as f:
    f.write(b"GGUF")
for args, msg in [(model + ["--memory", "cpu=1GiB"], "--memory need a model file"),
                  ([magic, "--memory", "1GiB"], "a budget is DEVICE=SIZE"),
                  ([magic, "--memory", "cuda=1GiB"], "another device than --backend's: cuda")]:
    r = subprocess.run([serve] + args, capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and msg in r.stderr, "%r: %d %r" % (args, r.returncode, r.stderr))


def shapes(s):
    st, h, body = s.request("GET", "/health")
    check(st == 200 and json.loads(body) == {"status": "ok"}, "/health: %d %r" % (st, body))
    st, _, body = s.request("GET", "/v1/models")
    m = json.loads(body)
    check(st == 200 and m["object"] == "list" and m["data"][0]["object"] == "model"
          and m["data"][0]["id"] == "tiny256.plan", "/v1/models: %r" % m)
    st, r = s.post(CHAT, {"model": "x", "messages": USER, "max_tokens": 8, "ignore_eos": True})
    check(st == 200, "chat status %d" % st)
    check(r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
          and isinstance(r["created"], int) and r["model"] == "tiny256.plan", "chat head %r" % r)
    c = r["choices"][0]
    check(c["index"] == 0 and c["message"]["role"] == "assistant"
          and isinstance(c["message"]["content"], str) and c["finish_reason"] == "length"
          and c["logprobs"] is None, "chat choice %r" % c)
    u = r["usage"]
    check(u["completion_tokens"] == 8 and u["prompt_tokens"] > 10
          and u["total_tokens"] == u["prompt_tokens"] + 8
          and u["prompt_tokens_details"]["cached_tokens"] >= 0, "chat usage %r" % u)
    ids = [72, 101, 108, 108, 111, 44, 32, 119]
    st, r = s.post(COMP, {"prompt": ids, "max_tokens": 5, "ignore_eos": True})
    check(st == 200 and r["object"] == "text_completion" and r["id"].startswith("cmpl-"),
          "completion head %r" % r)
    check(r["usage"]["prompt_tokens"] == len(ids) and r["usage"]["completion_tokens"] == 5
          and r["choices"][0]["finish_reason"] == "length"
          and isinstance(r["choices"][0]["text"], str), "completion %r" % r)
    # The default max_tokens of completions is 16; chat's runs to EOS or the context.
    st, r = s.post(COMP, {"prompt": "Hello", "ignore_eos": True})
    check(r["usage"]["completion_tokens"] == 16, "completions' default max_tokens: %r" % r["usage"])
    # The same conversation again: its prompt is in a slot's cache but for the last token.
    st, r1 = s.post(CHAT, {"messages": USER, "max_tokens": 2})
    st, r2 = s.post(CHAT, {"messages": USER, "max_tokens": 2})
    p = r2["usage"]["prompt_tokens"]
    check(r2["usage"]["prompt_tokens_details"]["cached_tokens"] == p - 1,
          "cached_tokens %r (prompt %d)" % (r2["usage"], p))


def streaming(s):
    for path, body in [(CHAT, {"messages": USER}), (COMP, {"prompt": "Hello, how are you?"})]:
        for temp in (0, 1.0):
            req = dict(body, max_tokens=24, temperature=temp, seed=7, ignore_eos=True)
            st, r = s.post(path, req)
            want = r["choices"][0].get("message", {}).get("content") if path == CHAT \
                else r["choices"][0]["text"]
            ev = s.stream(path, dict(req, stream=True, stream_options={"include_usage": True}))
            check(ev[-1] == "[DONE]", "%s: [DONE] last" % path)
            chunks = ev[:-1]
            obj = "chat.completion.chunk" if path == CHAT else "text_completion"
            check(all(c["object"] == obj and c["id"] == chunks[0]["id"] for c in chunks),
                  "%s: chunks' object and id" % path)
            if path == CHAT:
                check(chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""},
                      "first chunk has the role: %r" % chunks[0])
                got = "".join(c["choices"][0]["delta"].get("content", "")
                              for c in chunks if c["choices"])
            else:
                got = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
            check(got == want, "%s temp %g: streamed %r, unstreamed %r" % (path, temp, got, want))
            fin = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
            check(fin[-1] == "length" and all(f is None for f in fin[:-1]),
                  "%s: finish reasons %r" % (path, fin))
            last = chunks[-1]
            check(last["choices"] == [] and last["usage"]["completion_tokens"] == 24
                  and last["usage"]["total_tokens"] == last["usage"]["prompt_tokens"] + 24
                  and all(c["usage"] is None for c in chunks[:-1]),
                  "%s: usage chunk %r" % (path, last))
    ev = s.stream(CHAT, {"messages": USER, "max_tokens": 3, "stream": True})
    check(all("usage" not in c for c in ev[:-1]), "no usage without include_usage")


def stops(s):
    req = {"prompt": "Hello, how are you?", "max_tokens": 40, "temperature": 1.0, "seed": 3,
           "ignore_eos": True}
    st, r = s.post(COMP, req)
    text = r["choices"][0]["text"]
    stop = next((text[i:i + 3] for i in range(6, len(text) - 3)
                 if text.find(text[i:i + 3]) == i and "\ufffd" not in text[i:i + 3]), None)
    if not check(stop is not None, "a stop string in %r" % text):
        return
    want = text[:text.find(stop)]
    for stop_field in (stop, ["zzzzqqq", stop]):
        st, r = s.post(COMP, dict(req, stop=stop_field))
        c = r["choices"][0]
        check(c["text"] == want and c["finish_reason"] == "stop",
              "stop %r: %r (%s), want %r" % (stop_field, c["text"], c["finish_reason"], want))
        ev = s.stream(COMP, dict(req, stop=stop_field, stream=True))
        got = "".join(e["choices"][0]["text"] for e in ev[:-1])
        check(got == want, "streamed with stop %r: %r, want %r" % (stop_field, got, want))


def logprobs(s):
    st, r = s.post(CHAT, {"messages": USER, "max_tokens": 5, "logprobs": True, "top_logprobs": 3,
                          "ignore_eos": True})
    lp = r["choices"][0]["logprobs"]["content"]
    check(len(lp) == 5 and all(len(t["top_logprobs"]) == 3 and t["logprob"] <= 0
                               and isinstance(t["bytes"], list) for t in lp),
          "chat logprobs %r" % lp[:1])
    check(all(t["top_logprobs"][0]["logprob"] >= t["logprob"] - 1e-6 for t in lp),
          "the top alternative is at least as likely")
    st, r = s.post(COMP, {"prompt": "Hello", "max_tokens": 4, "logprobs": 2, "ignore_eos": True})
    lp = r["choices"][0]["logprobs"]
    check(len(lp["tokens"]) == 4 and len(lp["token_logprobs"]) == 4
          and all(len(t) <= 2 for t in lp["top_logprobs"]) and len(lp["text_offset"]) == 4,
          "completion logprobs %r" % lp)
    ev = s.stream(CHAT, {"messages": USER, "max_tokens": 4, "logprobs": True, "stream": True,
                         "ignore_eos": True})
    n = sum(len(c["choices"][0]["logprobs"]["content"]) for c in ev[:-1]
            if c["choices"] and c["choices"][0]["logprobs"])
    check(n == 4, "streamed logprobs: %d tokens" % n)


def errors(s):
    def err(path, body, status, param=None, code=None, text=None, method="POST"):
        st, h, data = s.request(method, path, body)
        try:
            e = json.loads(data)["error"]
        except (ValueError, KeyError, TypeError):
            check(False, "%s %r: not an error body: %r" % (path, body, data))
            return None
        check(st == status and set(e) == {"message", "type", "param", "code"}
              and e["param"] == param and e["code"] == code and (not text or text in e["message"]),
              "%s %r: %d %r" % (path, body, st, e))
        return h
    err(CHAT, "{bad json", 400)
    err(CHAT, '{"messages": [1, 2', 400)
    err(CHAT, "[]", 400)
    err(CHAT, {}, 400, "messages")
    err(CHAT, {"messages": "hi"}, 400, "messages")
    err(CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role")
    err(CHAT, {"messages": [{"role": "user"}]}, 400, "messages[0].content")
    err(CHAT, {"messages": USER, "temperature": -1}, 400, "temperature")
    err(CHAT, {"messages": USER, "temperature": "hot"}, 400, "temperature")
    err(CHAT, {"messages": USER, "top_p": 1.5}, 400, "top_p")
    err(CHAT, {"messages": USER, "n": 2}, 400, "n")
    err(CHAT, {"messages": USER, "max_tokens": -3}, 400, "max_tokens")
    err(CHAT, {"messages": USER, "max_tokens": 2.5}, 400, "max_tokens")
    err(CHAT, {"messages": USER, "stop": 5}, 400, "stop")
    err(CHAT, {"messages": USER, "stream": "yes"}, 400, "stream")
    err(CHAT, {"messages": USER, "stream_options": {"include_usage": True}}, 400,
        "stream_options")
    err(CHAT, {"messages": USER, "top_logprobs": 3}, 400, "top_logprobs")
    err(CHAT, {"messages": USER, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs")
    err(COMP, {}, 400, "prompt")
    err(COMP, {"prompt": ["a", "b"]}, 400, "prompt")
    err(COMP, {"prompt": [1, 100000]}, 400, "prompt")
    err(COMP, {"prompt": "x", "logprobs": 6}, 400, "logprobs")
    err(COMP, {"prompt": "\ud800"}, 400)
    long = "a b " * 300
    err(COMP, {"prompt": long}, 400, "prompt", "context_length_exceeded",
        "maximum context length is 256 tokens. However, your prompt resulted in 6")
    err(CHAT, {"messages": [{"role": "user", "content": long}]}, 400, "messages",
        "context_length_exceeded", "maximum context length is 256 tokens")
    err("/v1/nothing", None, 404, None, "unknown_url", method="GET")
    h = err(CHAT, None, 405, None, "method_not_allowed", method="GET")
    check(h and h.get("Allow") == "POST", "405's Allow: %r" % h)
    err("/health", "{}", 405, None, "method_not_allowed")
    m = s.metrics()
    check(m['gplan_rejects_total{reason="bad_request"}'] >= 20
          and m['gplan_rejects_total{reason="context_length_exceeded"}'] == 2
          and m['gplan_rejects_total{reason="not_found"}'] == 1
          and m['gplan_rejects_total{reason="method_not_allowed"}'] == 2,
          "rejects by reason: %r" % {k: v for k, v in m.items() if "rejects" in k})


def healthy(s, what):
    try:
        st, _, _ = s.request("GET", "/health", timeout=10)
        check(st == 200, "after %s: /health %d" % (what, st))
    except OSError as e:
        check(False, "after %s: /health failed: %s" % (what, e))


def raw_sockets(s):
    port = s.port
    out = raw(port, b"GARBAGE\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 400") or out == b"", "garbage request line: %r" % out[:40])
    healthy(s, "garbage")
    out = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n"
              b'{"prompt"')
    check(out.startswith(b"HTTP/1.1 400") and b"not valid JSON" in out, "truncated JSON: %r" % out)
    # Fewer bytes than Content-Length, then the client stops sending: the connection ends when
    # the client closes (no answer is owed), and nothing leaks.
    out = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
              b'{"prompt": "x"}', timeout=1, shut=True)
    check(not out.startswith(b"HTTP/1.1 200"), "short body answered: %r" % out[:60])
    healthy(s, "a body shorter than Content-Length")
    # More bytes than Content-Length: the body is cut there (bad JSON), the rest is garbage.
    body = b'{"prompt": "Hello", "max_tokens": 2}'
    out = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n" + body,
              timeout=2)
    check(out.startswith(b"HTTP/1.1 400"), "long body: %r" % out[:60])
    healthy(s, "a body longer than Content-Length")
    deep = b"[" * 10000 + b"]" * 10000
    st, r = s.post(COMP, deep)
    check(st == 400 and "not valid JSON" in r["error"]["message"], "10000 levels: %d %r" % (st, r))
    deep = b'{"prompt": ' + b"[" * 10000 + b"1" + b"]" * 10000 + b"}"
    st, r = s.post(COMP, deep)
    check(st == 400, "10000 levels in prompt: %d %r" % (st, r))
    healthy(s, "deep nesting")
    # 10 MiB: refused from the headers with a Content-Length, after reading when chunked.
    big = 10 << 20
    sk = socket.create_connection(("127.0.0.1", port), timeout=10)
    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % big)
    out = sk.recv(65536)
    sk.close()
    check(out.startswith(b"HTTP/1.1 413") and b"request_too_large" in out, "10 MiB: %r" % out[:80])
    sk = socket.create_connection(("127.0.0.1", port), timeout=30)
    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b"a" * 65536
    for _ in range(big // len(piece)):
        sk.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
    sk.sendall(b"0\r\n\r\n")
    out = sk.recv(65536)
    sk.close()
    check(out.startswith(b"HTTP/1.1 413"), "10 MiB chunked: %r" % out[:80])
    healthy(s, "10 MiB bodies")
    m = s.metrics()
    check(m['gplan_rejects_total{reason="body_too_large"}'] == 2, "413s counted")
    # Keep-alive: two requests on one connection.
    c = s.conn()
    for _ in range(2):
        c.request("POST", COMP, body=json.dumps({"prompt": "Hi", "max_tokens": 2}))
        r = c.getresponse()
        check(r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] <= 2,
              "keep-alive request")
    c.close()


def stalled_stream(s, prompt="Hi"):
    """A stream whose client reads nothing into a small buffer: its ring fills with logprobs and
    the job waits in its slot (running) until the client reads or goes."""
    sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sk.settimeout(30)
    sk.connect(("127.0.0.1", s.port))
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": 250,
                       "ignore_eos": True, "stream": True, "logprobs": True,
                       "top_logprobs": 20}).encode()
    sk.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
               % len(body) + body)
    return sk


def queue_full(compile_tool):
    s = Server(serve, model, ["--slots", "1", "--queue", "0"])
    try:
        c = stalled_stream(s)
        check(s.wait_metric("gplan_requests_running", lambda v: v == 1) == 1, "1 running")
        st, h, data = s.request("POST", COMP, json.dumps({"prompt": "Hi", "max_tokens": 2}))
        check(st == 503 and h.get("Retry-After") == "1"
              and json.loads(data)["error"]["type"] == "unavailable_error",
              "queue full: %d %r %r" % (st, h, data))
        check(s.metrics()['gplan_rejects_total{reason="queue_full"}'] == 1, "queue_full counted")
        c.close()
    finally:
        check(s.stop() == 0, "exit status after SIGTERM")


def killed_streams():
    s = Server(serve, model, ["--slots", "16"])
    try:
        socks = [stalled_stream(s, "Hello %d" % i) for i in range(16)]
        for sk in socks:
            check(b"200 OK" in sk.recv(512), "a stream started")
        check(s.wait_metric("gplan_requests_running", lambda v: v == 16) == 16, "16 running")
        steps0 = s.metrics()["gplan_engine_steps_total"]
        for sk in socks[:8]:
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sk.close()
        t0 = time.time()
        running = s.wait_metric("gplan_requests_running", lambda v: v <= 8, timeout=5)
        m = s.metrics()
        check(running == 8, "after killing 8 of 16 streams: %d running (%.2f s, %d steps)" %
              (running, time.time() - t0, m["gplan_engine_steps_total"] - steps0))
        check(m['gplan_requests_finished_total{reason="cancel"}'] == 8, "8 cancelled")
        check(m["gplan_slots_free"] == 8, "8 slots free: %r" % m["gplan_slots_free"])
        print("killed streams: slots freed in %.3f s, %d engine steps" %
              (time.time() - t0, m["gplan_engine_steps_total"] - steps0))
        for sk in socks[8:]:
            sk.close()
        check(s.wait_metric("gplan_requests_running", lambda v: v == 0) == 0, "all freed")
    finally:
        check(s.stop() == 0, "exit status")


def mixed(n):
    s = Server(serve, model, ["--slots", "4", "--queue", "64"])
    reqs = []
    for i in range(n):
        k = i % 6
        if k == 0:
            reqs.append((CHAT, {"messages": USER, "max_tokens": 8}, False))
        elif k == 1:
            reqs.append((COMP, {"prompt": "Hello %d" % (i % 7), "max_tokens": 12,
                                "temperature": 0.8, "seed": i}, True))
        elif k == 2:
            reqs.append((COMP, {"prompt": [1, 2, 3, i % 50], "max_tokens": 6, "stop": ["e", "a"],
                                "top_k": 5}, False))
        elif k == 3:
            reqs.append((CHAT, {"messages": USER + [{"role": "assistant", "content": "Fine"},
                                                    {"role": "user", "content": "And %d" % i}],
                                "max_tokens": 10, "logprobs": True, "top_logprobs": 2,
                                "top_p": 0.9, "min_p": 0.05, "temperature": 1}, i % 2 == 0))
        elif k == 4:
            reqs.append((COMP, {"prompt": "x" * (i % 40 + 1), "max_tokens": 20,
                                "ignore_eos": True}, True))
        else:
            reqs.append((CHAT, {"messages": [{"role": "user", "content": "stop %d" % i}],
                                "max_tokens": 5, "temperature": -1}, False))  # refused

    def run(batch, fails):
        def worker(items):
            for path, body, stream in items:
                try:
                    if stream:
                        ev = s.stream(path, dict(body, stream=True))
                        if ev[-1] != "[DONE]":
                            fails.append((path, body, ev[-1]))
                    else:
                        st, r = s.post(path, body)
                        if st != (400 if body.get("temperature") == -1 else 200):
                            fails.append((path, body, st, r))
                except Exception as e:  # noqa: BLE001
                    fails.append((path, body, repr(e)))
        ts = [threading.Thread(target=worker, args=(batch[i::8],)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def settled():
        """The process's counts once the connection threads are gone."""
        until = time.time() + 10
        last = None
        while time.time() < until:
            cur = s.proc_counts()
            if last and cur[1:] == last[1:] and s.metrics()["gplan_http_requests_active"] == 1:
                return cur
            last = cur
            time.sleep(0.2)
        return last
    try:
        fails = []
        run(reqs[:60], fails)  # warm-up: every kind of request, the malloc arenas of 8 threads
        base = settled()
        a0 = s.metrics()
        t0 = time.time()
        run(reqs, fails)
        dt = time.time() - t0
        after = settled()
        a1 = s.metrics()
        check(not fails, "mixed requests failed: %r" % fails[:3])
        print("mixed: %d requests in %.1f s; RSS %d -> %d kB, fds %d -> %d, threads %d -> %d"
              % (n, dt, base[0], after[0], base[1], after[1], base[2], after[2]))
        if a1["gplan_engine_alloc_counting"]:
            check(a1["gplan_engine_allocations_total"] == a0["gplan_engine_allocations_total"] == 0,
                  "allocations on the engine thread after warm-up: %d" %
                  a1["gplan_engine_allocations_total"])
            check(after[0] - base[0] < 4096, "RSS grew by %d kB" % (after[0] - base[0]))
        else:
            print("mixed: allocation counts and RSS not checked (sanitizer build)")
        check(after[1] == base[1], "fds %d -> %d" % (base[1], after[1]))
        check(after[2] == base[2], "threads %d -> %d" % (base[2], after[2]))
        tokens = a1["gplan_completion_tokens_total"] - a0["gplan_completion_tokens_total"]
        check(tokens > n, "tokens generated: %d" % tokens)
    finally:
        check(s.stop() == 0, "exit status")


def drain():
    """SIGTERM with a stream running: it finishes ([DONE]), new connections are refused, exit 0."""
    s = Server(serve, model, ["--slots", "2", "--grace", "20"])
    c = s.conn()
    c.request("POST", COMP, body=json.dumps({"prompt": "Hi", "max_tokens": 150,
                                             "ignore_eos": True, "stream": True}))
    r = c.getresponse()
    r.read(10)
    s.proc.send_signal(signal.SIGTERM)
    data = r.read().decode()
    check(data.rstrip().endswith("data: [DONE]"), "the running stream finished: %r" % data[-80:])
    check(s.stop() == 0, "exit status after the drain")
    try:
        socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
        check(False, "the port still accepts after the exit")
    except OSError:
        pass
    # The grace period over: the running request is cancelled, still exit 0.
    s = Server(serve, model, ["--slots", "2", "--grace", "0"])
    c = stalled_stream(s)
    check(s.wait_metric("gplan_requests_running", lambda v: v == 1) == 1, "1 running")
    t0 = time.time()
    check(s.stop() == 0 and time.time() - t0 < 10, "exit 0 after cancelling at the grace's end")


s = Server(serve, model, ["--slots", "4"], log=os.path.join(tmp, "serve.log"))
try:
    for f in (shapes, streaming, stops, logprobs, errors, raw_sockets):
        f(s)
finally:
    check(s.stop() == 0, "exit status after SIGTERM")
queue_full(compile_tool)
killed_streams()
mixed(n_mixed)
drain()
check.done("test_serve")
