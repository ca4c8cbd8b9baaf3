#!/usr/bin/env bash
# Probe build (HEAD + probe-dq.patch, timing only): RETORT_PROBE_DQ=1 skips the bulk reductions' issue (the shared
# memory writes and barriers stay), =2 skips dQ's additions whole; two rounds. Then Nsight Compute on the default
# backward at 4 x 4096 x 32 x 8 x 128: speed of light, memory (L2 hit rates of the reductions), warp states.
cd "$(dirname "$0")/../../.."
RES=/tmp/r2; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r2' EXIT
tar xJf gpu/p2.tar.xz -C gpu; b=$PWD/gpu/p2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,4x4096x32x8x64,4x4096x12x12x64
for round in 1 2; do for p in 0 1 2; do for w in end diagonal; do
  env RETORT_PROBE_DQ=$p RETORT_FLASH_BACKWARD_WALK=$w timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/p$p-$w-r$round.jsonl > /dev/null 2>&1
done; done; done
python3 - $RES <<'PY'
import json, sys, glob, collections
t = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/*-r?.jsonl")):
    v = f.split("/")[-1].rsplit("-r", 1)[0]
    for line in open(f):
        r = json.loads(line)
        t[(r["shape"], v)].append(r["forward_backward_ms"] - r["forward_ms"])
vs = sorted({k[1] for k in t}); shapes = list(dict.fromkeys(k[0] for k in t))
print("backward ms (min / max of rounds)"); print("shape | " + " | ".join(vs))
for s in shapes: print(s, "|", " | ".join("%.3f/%.3f" % (min(t[(s, v)]), max(t[(s, v)])) for v in vs))
PY
for w in end diagonal; do
RETORT_FLASH_BACKWARD_WALK=$w timeout 240 ncu --kernel-name regex:wgmma_backward_pipelined --launch-skip 0 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats \
  --metrics lts__t_sectors_srcunit_tex_op_red_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_red_lookup_miss.sum,lts__t_sectors_op_red_lookup_hit.sum,lts__t_sectors_op_red_lookup_miss.sum,lts__t_sectors_op_read_lookup_hit.sum,lts__t_sectors_op_read_lookup_miss.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum \
  -o $RES/bwd-$w $b/bench_attention --device cuda --dtype bf16 --paths flash --repeats 1 --shapes 4x4096x32x8x128 > $RES/ncu-$w.log 2>&1; echo "ncu $w rc $?"
ncu --import $RES/bwd-$w.ncu-rep --page details > $RES/bwd-$w-details.txt 2>&1
ncu --import $RES/bwd-$w.ncu-rep --page raw --csv > $RES/bwd-$w-raw.csv 2>&1
grep -E "Duration|Issue Slots Busy|Tensor|No Eligible|Warp Cycles Per Issued|L2 Hit|Memory Throughput|DRAM Throughput|Stall|red_lookup|dram__bytes|op_red" $RES/bwd-$w-details.txt | head -30
done
