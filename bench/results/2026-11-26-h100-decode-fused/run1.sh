#!/usr/bin/env bash
# Call 1 of the fused decode work on one H100: the new kernel and model tests and the generation tests on the GPU
# (gpu-checks/decode-fused.sh), the generation benchmark at GPT-2 small's shape, bf16, greedy, prompt 128, 128 new
# tokens, batches 1, 8 and 32, fused (with and without programmatic dependent launch) and unfused in one binary, and
# Nsight Compute's duration of every kernel of a few decode steps at batch 1 (no graphs), fused and unfused.
# Runs from the bundle gpu/dec (binaries under tests/ and bench/, the scripts beside them); results in $OUT/r1.tgz.
set -uo pipefail
t0=$(date +%s)
tar xJf gpu/dec.tar.xz -C gpu
b=$PWD/gpu/dec
export LD_LIBRARY_PATH=$b/devlibs
cd "$b"
R=/tmp/r1; mkdir -p $R; trap 'tar czf $OUT/r1.tgz -C /tmp r1' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
echo "commit $(cat commit.txt)"
BATCHES=1,8,32 NEW=128 REPEATS=3 PEERS=0 timeout 230 bash gpu-checks/decode-fused.sh . $R/check 2>&1 | tee $R/check.txt
echo "check done at $(( $(date +%s) - t0 )) s"
g=(--batches 1 --prompt 128 --new 4 --repeats 0 --graphs false)
for mode in fused unfused; do
  [[ $mode == unfused ]] && export RETORT_DECODE_FUSED=0
  timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv ./bench/bench_generate "${g[@]}" \
    > $R/ncu-$mode.csv 2> $R/ncu-$mode.err; echo "ncu $mode rc $?"
  unset RETORT_DECODE_FUSED
done
python3 - $R <<'PY'
import csv, sys, collections
r = sys.argv[1]
for mode in ("fused", "unfused"):
    try:
        rows = [x for x in csv.reader(open(f"{r}/ncu-{mode}.csv")) if len(x) > 10]
    except OSError:
        continue
    head = rows[0]; rows = rows[1:]
    k, v = head.index("Kernel Name"), head.index("Metric Value")
    # The last decode step: from the last embedding kernel to the end.
    names = [x[k] for x in rows]
    starts = [i for i, n in enumerate(names) if "embedding" in n]
    first = starts[-1] if starts else max(0, len(rows) - 120)
    while first > 0 and "embedding" in names[first - 1]:
        first -= 1  # the unfused step looks up the token and the position tables separately
    last = rows[first:]
    total = sum(float(x[v].replace(",", "")) for x in last) / 1e3
    by = collections.defaultdict(lambda: [0, 0.0])
    for x in last:
        key = x[k].split("(")[0][:90]
        by[key][0] += 1; by[key][1] += float(x[v].replace(",", "")) / 1e3
    print(f"== {mode}: last decode step, {len(last)} kernels, {total:.1f} us of kernel time")
    for key, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{us:9.1f} us {n:4d}  {key}")
PY
echo "all done at $(( $(date +%s) - t0 )) s"
