# Kernel durations of the last decode step in an Nsight Compute CSV (gpu__time_duration.sum per kernel), grouped by
# kernel: python3 ncu_step.py RUN_DIR (reads RUN_DIR/ncu-fused.csv and ncu-unfused.csv). run1.sh's inline version of
# this took the benchmark's own output line for the CSV header; this one finds the header row.
import csv, sys, collections
r = sys.argv[1]
for mode in ("fused", "unfused"):
    try:
        rows = [x for x in csv.reader(open(f"{r}/ncu-{mode}.csv"))]
    except OSError:
        continue
    h = next(i for i, x in enumerate(rows) if x and x[0] == "ID")
    head = rows[h]; rows = [x for x in rows[h + 1:] if len(x) == len(head)]
    k, v = head.index("Kernel Name"), head.index("Metric Value")
    names = [x[k] for x in rows]
    starts = [i for i, n in enumerate(names) if "embedding" in n]
    first = starts[-1] if starts else max(0, len(rows) - 120)
    while first > 0 and "embedding" in names[first - 1]:
        first -= 1
    last = rows[first:]
    total = sum(float(x[v].replace(",", "")) for x in last) / 1e3
    by = collections.defaultdict(lambda: [0, 0.0])
    for x in last:
        key = x[k].split("(")[0][:100]
        by[key][0] += 1; by[key][1] += float(x[v].replace(",", "")) / 1e3
    print(f"== {mode}: last decode step, {len(last)} kernels, {total:.1f} us of kernel time")
    for key, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{us:9.1f} us {n:4d}  {key}")
