"""What the gplan-serve tests share: a tiny model (examples/gpt2.gplan, 2 layers, 64 wide, 16
tokens an eval, 256 positions, random weights, the 384-token BPE of tests/cli/tokenizer with its
ChatML template), a server started on a free loopback port, HTTP helpers, /metrics and /proc."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

SKIP = 77


class Server:
    """gplan-serve on 127.0.0.1 with --port 0; the port read from its first line."""

    def __init__(self, serve, model_args, extra=(), log=None):
        self.log = open(log or os.devnull, "w")
        self.proc = subprocess.Popen([serve, *model_args, "--port", "0", *extra],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("gplan-serve did not start: %r" % line)
        self.port = int(m.group(1))
        line = self.proc.stdout.readline()
        if "ready" not in line:
            self.proc.kill()
            raise RuntimeError("gplan-serve is not ready: %r" % line)

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers, body bytes) on a fresh connection."""
        c = self.conn(timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def post(self, path, obj, timeout=60):
        status, _, data = self.request("POST", path, obj, {"Content-Type": "application/json"},
                                       timeout)
        return status, json.loads(data) if data else None

    def stream(self, path, obj, timeout=60):
        """The parsed data: events of a streamed request, "[DONE]" last."""
        c = self.conn(timeout)
        c.request("POST", path, body=json.dumps(obj), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        assert r.getheader("Content-Type") == "text/event-stream"
        events = []
        for raw in r.read().decode().split("\n\n"):
            if raw.startswith("data: "):
                d = raw[6:]
                events.append(d if d == "[DONE]" else json.loads(d))
            else:
                assert raw == "", raw
        c.close()
        return events

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def wait_metric(self, name, pred, timeout=10):
        until = time.time() + timeout
        while True:
            v = self.metrics()[name]
            if pred(v) or time.time() > until:
                return v
            time.sleep(0.02)

    def proc_counts(self):
        """(RSS kB, open fds, threads) of the server process."""
        pid = self.proc.pid
        status = open("/proc/%d/status" % pid).read()
        rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
        threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
        return rss, len(os.listdir("/proc/%d/fd" % pid)), threads

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signals the server; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed after %ds" % timeout
        self.log.close()
        return rc


def tiny_model(compile_tool, src, tmp, n_positions=256):
    """The tiny model's gplan-serve arguments (its plan compiled into tmp)."""
    os.makedirs(tmp, exist_ok=True)
    plan = os.path.join(tmp, "tiny%d.plan" % n_positions)
    defs = ["n_layer=2", "n_embd=64", "n_head=4", "vocab_size=384", "n_batch=16",
            "n_positions=%d" % n_positions]
    cmd = [compile_tool, os.path.join(src, "examples/gpt2.gplan"), "-o", plan, "-D", "n_seq=16"]
    for d in defs:
        cmd += ["-D", d]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return [plan, "--random-weights", "4", "--tokenizer", os.path.join(src, "tests/cli/tokenizer"),
            "--threads", "1"]


def raw(port, data, timeout=10, shut=False):
    """Sends bytes on a fresh socket and reads until the server closes or timeout: the bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not b:
                break
            out += b
        return out
    finally:
        s.close()


class Checks:
    """Named checks: each failure printed, the count the exit status."""

    def __init__(self):
        self.failed = 0
        self.n = 0

    def __call__(self, cond, what):
        self.n += 1
        if not cond:
            self.failed += 1
            print("FAIL: %s" % what, flush=True)
        return cond

    def done(self, name):
        print("%s: %d checks, %d failed" % (name, self.n, self.failed))
        sys.exit(1 if self.failed else 0)
