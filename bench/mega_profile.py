#!/usr/bin/env python3
"""Reads a GPLAN_CUDA_MEGA_PROFILE file (the streaming persistent kernel's stamps) and prints where
each stage's time goes. Stamps per block and stage (globaltimer ns): 0 start, 1 the stage before
is done everywhere (seen), 2 x ready, 3 first chunk in, 4 last chunk in, 5 done; producer: 6 first
chunk issued, 7 last chunk issued; 8 to 11 (when present): warp 0's clock cycles in the stage waiting
for chunks, summing them, finishing units, and between chunks. Usage: mega_profile.py FILE [PERIOD]"""
import struct
import sys


def main():
    path = sys.argv[1]
    period = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    data = open(path, 'rb').read()
    grid, cap = struct.unpack_from('<ii', data, 0)
    per = (len(data) - 8) // 8 // (grid * cap)
    n = grid * cap * per
    v = struct.unpack_from('<%dQ' % n, data, 8)

    def st(b, i, k):
        return v[(b * cap + i) * per + k]

    stages = 0
    while stages < cap and st(0, stages, 5):
        stages += 1
    t0 = min(st(b, 0, 0) for b in range(grid))
    rows = []
    prev_done = t0
    for i in range(stages):
        done = max(st(b, i, 5) for b in range(grid))
        seen = [st(b, i, 1) for b in range(grid)]
        mv = st(0, i, 2) != 0

        def med(a, b_):
            d = sorted(st(b, i, b_) - st(b, i, a) for b in range(grid)
                       if st(b, i, a) and st(b, i, b_))
            return d[len(d) // 2] / 1e3 if d else 0.0

        slow = max(range(grid), key=lambda b: st(b, i, 5))
        prod_first = [st(b, i, 6) for b in range(grid) if st(b, i, 6)]
        prod_last = [st(b, i, 7) for b in range(grid) if st(b, i, 7)]
        rows.append(dict(
            i=i, mv=mv, span=(done - prev_done) / 1e3,
            seen=(min(seen) - prev_done) / 1e3, seen_max=(max(seen) - prev_done) / 1e3,
            x=med(1, 2) if mv else 0.0, first=med(2, 3) if mv else 0.0,
            chunks=med(3, 4) if mv else 0.0, tail=med(4, 5) if mv else med(1, 5),
            slow=slow, slow_work=(st(slow, i, 5) - st(slow, i, 1)) / 1e3,
            p_first=((sorted(prod_first)[len(prod_first) // 2] - prev_done) / 1e3
                     if prod_first else 0.0),
            p_last=((max(prod_last) - prev_done) / 1e3 if prod_last else 0.0)))
        cyc = [sorted(st(b, i, 8 + k) for b in range(grid))[grid // 2] / 1e3 if per >= 12 else 0.0
               for k in range(4)]
        rows[-1].update(wait=cyc[0], sums=cyc[1], fin=cyc[2], book=cyc[3])
        prev_done = done
    total = (prev_done - t0) / 1e3
    print('grid %d, %d stages, %.1f us from the first start to the last done' %
          (grid, stages, total))
    hdr = ('stage', 'mv', 'span', 'seen', 'seenmax', 'x', 'first', 'chunks', 'tail', 'slowblk',
           'slowwork', 'p1st', 'plast')
    print('%5s %2s %7s %7s %7s %6s %6s %7s %6s %7s %8s %7s %7s' % hdr)
    def line(r, label=None):
        print('%5s %2d %7.2f %7.2f %7.2f %6.2f %6.2f %7.2f %6.2f %7s %8.2f %7.2f %7.2f' % (
            label if label is not None else r['i'], r['mv'], r['span'], r['seen'], r['seen_max'],
            r['x'], r['first'], r['chunks'], r['tail'], r['slow'], r['slow_work'], r['p_first'],
            r['p_last']))
    for r in rows[:2 * period + 1]:
        line(r)
    if per >= 12:
        print('warp 0, kilocycles (median over blocks): wait, sums, finish, between chunks')
        for k in range(period):
            sel = [r for r in rows[1:] if (r['i'] - 1) % period == k]
            if sel:
                print('  +%d %8.2f %8.2f %8.2f %8.2f' % (k, *[sum(r[key] for r in sel) / len(sel)
                      for key in ('wait', 'sums', 'fin', 'book')]))
        r = rows[-1]
        print('  last %6.2f %8.2f %8.2f %8.2f' % (r['wait'], r['sums'], r['fin'], r['book']))
    print('mean by position (stages %d.. in periods of %d):' % (1, period))
    for k in range(period):
        sel = [r for r in rows[1:] if (r['i'] - 1) % period == k]
        if not sel:
            continue
        avg = {key: sum(r[key] for r in sel) / len(sel) for key in
               ('span', 'seen', 'seen_max', 'x', 'first', 'chunks', 'tail', 'slow_work',
                'p_first', 'p_last')}
        avg['mv'] = sel[0]['mv']
        avg['slow'] = '-'
        line(avg, '+%d' % k)
    line(rows[-1], 'last')


if __name__ == '__main__':
    main()
