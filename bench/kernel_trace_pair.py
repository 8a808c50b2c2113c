#!/usr/bin/env python3
"""The all-reduces of a 2-device trace (bench/kernel_trace.c's CSV), device against device.

usage: kernel_trace_pair.py TRACE.csv [NAME]
Takes each device's one-token graph launches (as kernel_trace.py does), pairs the i-th of device 0
with the i-th of device 1, and for every kernel named NAME (default k_all_reduce) reports, over
all of them: the skew (when the kernel before it ended on device 0 minus on device 1), how long
each device's all-reduce ran after the later of the two arrivals ("after both": the all-reduce's
own latency), and after its own device's arrival ("inc", as kernel_trace.py). Timestamps are
CUPTI's, on one time base for both devices."""
import collections, csv, statistics, sys

path = sys.argv[1]
name = sys.argv[2] if len(sys.argv) > 2 else "k_all_reduce"
groups = collections.defaultdict(list)
for dev, s, e, corr, blocks, kname in csv.reader(open(path)):
    groups[(int(dev), int(corr))].append((int(s), int(e), kname))
per_dev = collections.defaultdict(list)
for (dev, _), v in groups.items():
    per_dev[dev].append(sorted(v))
if sorted(per_dev) != [0, 1]:
    sys.exit("need devices 0 and 1")
sizes = collections.Counter(len(v) for d in (0, 1) for v in per_dev[d] if len(v) > 8)
size = sizes.most_common(1)[0][0]
evs = [sorted((v for v in per_dev[d] if len(v) == size), key=lambda v: v[0][0]) for d in (0, 1)]
n = min(len(evs[0]), len(evs[1]))
evs = [e[n // 4:n] for e in evs]  # leave the first quarter out (warm-up)
skew, after, inc, gap = [], ([], []), ([], []), []
for e0, e1 in zip(*evs):
    gap.append(e0[0][0] - e1[0][0])
    for k in range(1, size):
        if e0[k][2] != name or e1[k][2] != name:
            continue
        a = (e0[k - 1][1], e1[k - 1][1])
        f = (e0[k][1], e1[k][1])
        skew.append(a[0] - a[1])
        for d in (0, 1):
            after[d].append(f[d] - max(a))
            inc[d].append(f[d] - a[d])
us = lambda xs: statistics.median(xs) / 1e3
q = lambda xs, p: sorted(xs)[int(p * (len(xs) - 1))] / 1e3
print(f"{len(evs[0])} graph pairs, {len(skew)} {name}; graph start dev0 - dev1: median {us(gap):.2f} us")
print(f"arrival skew dev0 - dev1 (us): median {us(skew):.2f}, p10 {q(skew, .1):.2f}, p90 {q(skew, .9):.2f}, "
      f"median |skew| {us([abs(x) for x in skew]):.2f}")
for d in (0, 1):
    print(f"dev{d}: after both arrived median {us(after[d]):.2f} us (p10 {q(after[d], .1):.2f}, "
          f"p90 {q(after[d], .9):.2f}); inc median {us(inc[d]):.2f} us")
