#!/usr/bin/env python3
"""Load for bench/serve.sh: C concurrent clients against an OpenAI-compatible server, each sending
distinct prompts of P token ids to /v1/completions (streamed) for G tokens at temperature 0,
end-of-generation ignored. Prints one JSON line: aggregate tokens/s, time to first token p50/p99,
inter-token latency p99 (ms), errors, the server's peak RSS (MiB, from /proc when its pid is given).

Usage: serve_load.py URL CLIENTS REQUESTS_PER_CLIENT PROMPT_TOKENS GEN_TOKENS [--pid PID]
       [--shared N] [--vocab V]
--shared N: every prompt starts with the same N ids (a shared system prompt), the rest distinct.
Standard library only, so that it runs wherever the server does."""
import argparse
import http.client
import json
import threading
import time
import urllib.parse


def prompt_ids(client, req, n, shared, vocab):
    # distinct per (client, request) after the shared prefix; ids away from special ones
    ids = [100 + (7 * i) % (vocab - 200) for i in range(shared)]
    seed = client * 1009 + req * 31 + 1
    for i in range(n - shared):
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        ids.append(100 + seed % (vocab - 200))
    return ids


def one_request(url, ids, gen, out):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"model": "m", "prompt": ids, "max_tokens": gen, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True},
                       "ignore_eos": True, "cache_prompt": False})
    t0 = time.monotonic()
    times = []
    usage = None
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            out.append({"error": r.status})
            return
        buf = b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                for line in ev.split(b"\n"):
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:]
                    if data == b"[DONE]":
                        continue
                    msg = json.loads(data)
                    if msg.get("usage"):
                        usage = msg["usage"].get("completion_tokens")
                    ch = msg.get("choices") or []
                    if ch and ch[0].get("text"):
                        times.append(time.monotonic())
        n_tok = usage if usage is not None else len(times)
        out.append({"t0": t0, "times": times, "tokens": n_tok})
    except Exception as e:  # a refused or dropped connection is an error row, not a crash
        out.append({"error": str(e)})
    finally:
        conn.close()


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("clients", type=int)
    ap.add_argument("requests", type=int)
    ap.add_argument("prompt", type=int)
    ap.add_argument("gen", type=int)
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--shared", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=49152)
    a = ap.parse_args()
    results = []
    lock = threading.Lock()

    def client(c):
        mine = []
        for r in range(a.requests):
            one_request(a.url, prompt_ids(c, r, a.prompt, a.shared, a.vocab), a.gen, mine)
        with lock:
            results.extend(mine)

    t0 = time.monotonic()
    th = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    ok = [r for r in results if "error" not in r]
    errors = len(results) - len(ok)
    tokens = sum(r["tokens"] for r in ok)
    ttft = [(r["times"][0] - r["t0"]) * 1e3 for r in ok if r["times"]]
    itl = []
    for r in ok:
        ts = r["times"]
        itl += [(ts[i] - ts[i - 1]) * 1e3 for i in range(1, len(ts))]
    short = sum(1 for r in ok if r["tokens"] < a.gen)
    print(json.dumps({"clients": a.clients, "requests": len(results), "errors": errors,
                      "short": short, "tokens": tokens, "wall_s": round(wall, 3),
                      "tok_s": round(tokens / wall, 2) if wall > 0 else 0,
                      "ttft_p50_ms": round(pct(ttft, 50), 1), "ttft_p99_ms": round(pct(ttft, 99), 1),
                      "itl_p99_ms": round(pct(itl, 99), 1), "rss_mib": round(rss_mib(a.pid), 1)}))


if __name__ == "__main__":
    main()
