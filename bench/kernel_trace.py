#!/usr/bin/env python3
"""Where a one-token eval's time goes, from bench/kernel_trace.c's CSV.

usage: kernel_trace.py TRACE.csv [DEVICE] [POSITIONS]
The one-token graph is the most frequent group of kernels sharing a correlation id (a graph
launch). For each kernel, 'inc' is how far it moved the eval's finish line: its end minus the
latest end before it (so the inc column sums to the span); 'dur' is its own start to end, which
includes waiting at griddepcontrol.wait when launched early (PDL)."""
import collections, csv, sys

path = sys.argv[1]
want = int(sys.argv[2]) if len(sys.argv) > 2 else None
npos = int(sys.argv[3]) if len(sys.argv) > 3 else 16
groups = collections.defaultdict(list)
for dev, s, e, corr, blocks, name in csv.reader(open(path)):
    if want is None or int(dev) == want:
        groups[(int(dev), int(corr))].append((int(s), int(e), f"{name}[{blocks}]"))
sizes = collections.Counter(len(v) for v in groups.values() if len(v) > 8)
if not sizes:
    sys.exit("no graph launches in the trace")
size = sizes.most_common(1)[0][0]
evals = [sorted(v) for v in groups.values() if len(v) == size]
evals = evals[len(evals) // 4:]  # leave the first quarter out (warm-up)
n = len(evals)
spans = sorted(ev[-1][1] - ev[0][0] for ev in evals)
print(f"one-token graph: {size} kernels, {n} evals, span median {spans[n // 2] / 1e3:.1f} us")
inc, dur, cnt = collections.Counter(), collections.Counter(), collections.Counter()
pinc, pdur = [0.0] * size, [0.0] * size
for ev in evals:
    prev = ev[0][0]
    for i, (s, e, name) in enumerate(ev):
        end = max(e, prev)
        key = name.split("[")[0]
        inc[key] += end - prev
        dur[key] += e - s
        cnt[key] += 1
        pinc[i] += end - prev
        pdur[i] += e - s
        prev = end
print(f"{'kernel':28s} {'n/eval':>6s} {'inc us/eval':>11s} {'inc us':>7s} {'dur us':>7s}")
for k, v in inc.most_common():
    print(f"{k[:28]:28s} {cnt[k] / n:6.0f} {v / n / 1e3:11.1f} {v / cnt[k] / 1e3:7.2f} {dur[k] / cnt[k] / 1e3:7.2f}")
print(f"positions 0..{npos - 1}: name[blocks] inc dur (us)")
for i in range(min(size, npos)):
    print(f"  {i:3d} {evals[0][i][2][:40]:40s} {pinc[i] / n / 1e3:7.2f} {pdur[i] / n / 1e3:7.2f}")
