#!/usr/bin/env python3
"""Allocations per forwarded call, by the code that asked for them.

Reads two callgrind outputs of the gateway (a short and a long run of the same load, written
with --dump-instr=yes --compress-strings=no --compress-pos=no) and their call counts; counts
the calls into the heap allocator's entry points (mimalloc's, as `switchyard-alloc` calls
them) by the instruction that made each call, takes the difference of the two runs over the
difference of their forwarded calls, and names each site with `addr2line -i` (the innermost
frame that is not the standard library's allocation plumbing).

    alloc_sites.py BINARY SHORT.callgrind SHORT_CALLS LONG.callgrind LONG_CALLS [TOP]
"""
import re
import subprocess
import sys
from collections import Counter

ALLOCATORS = re.compile(r"^(mi_malloc|mi_malloc_aligned|mi_zalloc|mi_zalloc_aligned|mi_realloc|mi_realloc_aligned)$")
# Frames that only pass an allocation on: the site is the frame that called them.
PLUMBING = re.compile(r"/rustc/|/alloc/src/lib.rs")


def sites(path):
    """Calls into the allocator, by the calling instruction's address."""
    counts = Counter()
    target = None
    expect_cost = False
    count = 0
    with open(path) as f:
        for line in f:
            if expect_cost:
                expect_cost = False
                if target:
                    addr = line.split()[0]
                    counts[int(addr, 16)] += count
                continue
            if line.startswith("cfn="):
                target = bool(ALLOCATORS.match(line[4:].strip()))
            elif line.startswith("calls="):
                count = int(line[6:].split()[0])
                expect_cost = True
            elif line.startswith("fn="):
                target = None
    return counts


def names(binary, addrs):
    """Each address's site: the innermost inlined frame that is not allocation plumbing (its
    function and line), and the compiled function it lies in."""
    if not addrs:
        return {}
    out = subprocess.run(
        ["addr2line", "-i", "-f", "-C", "-a", "-e", binary] + [hex(a) for a in addrs],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    result, current, frames = {}, None, []

    def close():
        # addr2line -i prints the frames innermost first, each as its function and line; the
        # first's function is the compiled function the address lies in.
        if current is None or not frames:
            return
        outer = frames[0][0]
        site = next(
            ((f, l) for k, (f, l) in enumerate(frames) if k > 0 and not PLUMBING.search(l) and not f.startswith("__rust")),
            (outer, frames[-1][1]),
        )
        result[current] = (site[0], site[1], outer)

    i = 0
    while i < len(out):
        line = out[i]
        if line.startswith("0x"):
            close()
            current, frames = int(line, 16), []
            i += 1
            continue
        frames.append((line, out[i + 1] if i + 1 < len(out) else "?"))
        i += 2
    close()
    return result


def main():
    binary, short, short_calls, long, long_calls = sys.argv[1:6]
    top = int(sys.argv[6]) if len(sys.argv) > 6 else 40
    calls = int(long_calls) - int(short_calls)
    a, b = sites(short), sites(long)
    diff = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
    total = sum(diff.values())
    print(f"allocations per call: {total / calls:.2f} ({total} more allocations for {calls} more calls)")
    by_site = Counter()
    named = names(binary, sorted(k for k, v in diff.items() if v > 0))
    for addr, n in diff.items():
        if n <= 0:
            continue
        func, loc, outer = named.get(addr, ("?", "?", "?"))
        loc = re.sub(r"^.*?/(src|registry/src/[^/]+)/", "", loc)
        by_site[(func[:70], loc, outer[:90])] += n
    for (func, loc, outer), n in by_site.most_common(top):
        per = n / calls
        if per < 0.05:
            break
        print(f"  {per:6.2f}  {loc}  {func}  [in {outer}]")


if __name__ == "__main__":
    main()
