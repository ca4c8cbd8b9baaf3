#!/usr/bin/env bash
# Nsight Compute on two kernels of GPT-2 small's batch-32 decode step late in the generation (about position 210 of
# 256): the cache attention (10.6 us in the graph, 12 a step) and the norm that adds the output projection's partial
# sums (3.0 us, 24 a step), with stall samples on the attention's SASS. f3's bundle (1589f41).
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/f4; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp f4' EXIT
tar xJf gpu/f3.tar.xz -C gpu; b=$PWD/gpu/f3; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
NCU=/usr/local/cuda-13.0/bin/ncu
SEC=(--section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section InstructionStats)
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 1 --batches 32)
timeout 200 $NCU --kernel-name regex:cache_decode_kernel --launch-skip 1000 --launch-count 1 "${SEC[@]}" --section SourceCounters -o $RES/attention $b/bench_generate "${gen[@]}" > $RES/ncu-attention.log 2>&1; echo "ncu attention rc $?"
timeout 60 $NCU --import $RES/attention.ncu-rep --page details > $RES/attention-details.txt 2>&1
timeout 60 $NCU --import $RES/attention.ncu-rep --page source --csv --print-source sass > $RES/attention-sass.csv 2> $RES/sass.err; echo "sass rc $? $(wc -l < $RES/attention-sass.csv) lines"
echo "at $(( $(date +%s) - t0 )) s"
timeout 150 $NCU --kernel-name regex:add_partials_norm --launch-skip 2000 --launch-count 1 "${SEC[@]}" -o $RES/norm $b/bench_generate "${gen[@]}" > $RES/ncu-norm.log 2>&1; echo "ncu norm rc $?"
timeout 60 $NCU --import $RES/norm.ncu-rep --page details > $RES/norm-details.txt 2>&1
for f in attention norm; do
  echo "== $f"; grep -E "^  [a-zA-Z]|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|L2 Hit|Grid Size|Waves Per SM" $RES/$f-details.txt | head -30
done
python3 - $RES/attention-sass.csv <<'PY' 2>&1 | head -40
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[0]; print(hdr[:12])
# find stall columns
idx = {h: i for i, h in enumerate(hdr)}
samp = [h for h in hdr if "Sampling" in h and "All" in h]
print(samp)
col = idx[samp[0]] if samp else None
if col is not None:
    data = []
    for r in rows[2:]:
        try: data.append((float(r[col] or 0), r[idx.get("Source", 1)][:90]))
        except: pass
    tot = sum(d for d, _ in data)
    for d, s in sorted(data, reverse=True)[:25]: print("%6.1f%%  %s" % (100 * d / tot, s))
PY
gzip -9 $RES/*.csv $RES/*.log 2>/dev/null
echo "done at $(( $(date +%s) - t0 )) s"
