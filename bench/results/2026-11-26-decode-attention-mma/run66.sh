#!/usr/bin/env bash
# Call J: where a Llama-3.2-1B-shaped decode step at batch 1 goes (1.31 ms against the 0.52 ms its 2.5 GB of bf16
# weights take at the H200's bandwidth): Nsight Compute's kernel times of one step, fused and unfused, with the DRAM
# throughput of each kernel.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r66; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r66' EXIT
tar xJf gpu/da7.tar.xz -C gpu; b=$PWD/gpu/da7; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
llama=(--label llama-1b-shape --family llama --vocab 128256 --context 1024 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000)
for k in fused unfused; do
  if [[ $k == unfused ]]; then export RETORT_DECODE_FUSED=0; else unset RETORT_DECODE_FUSED; fi
  timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --print-units base --csv $b/bench/bench_generate "${llama[@]}" \
    --batches 1 --prompt 128 --new 3 --repeats 0 --graphs false > $RES/ncu-$k.csv 2> $RES/ncu-$k.err; echo "ncu $k rc $?"
done
unset RETORT_DECODE_FUSED
python3 - $RES <<'PY'
import csv, sys, collections
r = sys.argv[1]
for mode in ("fused", "unfused"):
    rows = list(csv.reader(open(f"{r}/ncu-{mode}.csv")))
    h = next(i for i, x in enumerate(rows) if x and x[0] == "ID"); head = rows[h]; rows = [x for x in rows[h + 1:] if len(x) == len(head)]
    k, m, v, idc = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value"), head.index("ID")
    per = collections.OrderedDict()
    for x in rows:
        per.setdefault(x[idc], {"name": x[k]})[x[m]] = float(x[v].replace(",", ""))
    ks = list(per.values())
    starts = [i for i, e in enumerate(ks) if "embedding" in e["name"]]
    first = starts[-1]
    while first > 0 and "embedding" in ks[first - 1]["name"]: first -= 1
    last = ks[first:]
    tot = sum(e["gpu__time_duration.sum"] for e in last) / 1e3; byt = sum(e["dram__bytes_read.sum"] for e in last) / 1e6
    print(f"== {mode}: {len(last)} kernels, {tot:.1f} us, {byt:.1f} MB read from DRAM, {byt / tot:.2f} TB/s")
    by = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for e in last:
        key = e["name"].split("(")[0][:90]; by[key][0] += 1; by[key][1] += e["gpu__time_duration.sum"] / 1e3; by[key][2] += e["dram__bytes_read.sum"] / 1e6
    for key, (n, us, mb) in sorted(by.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"{us:9.1f} us {n:4d} {mb:9.1f} MB {mb / us:6.2f} TB/s  {key}")
PY
