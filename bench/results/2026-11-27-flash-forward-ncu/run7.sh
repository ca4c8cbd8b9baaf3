#!/usr/bin/env bash
# The forward with the rest of each tile at the top of the next iteration (4c9ec14) against 83b3a2d in one call,
# three rounds; where the SASS puts the wait for the previous P V against the softmax's exponentials in both; the
# flash tests and memcheck; SDPA beside it.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r7; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r7' EXIT
tar xJf gpu/q7.tar.xz -C gpu; b=$PWD/gpu/q7; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in bench_attention bench_attention_83b3a2d; do
  /usr/local/cuda-13.0/bin/cuobjdump -sass -fun '_ZN6retort7kernels4cuda5flash57_GLOBAL__N__241b7c9e_24_flash_attention_wgmma_cu_d5c322fc20wgmma_forward_kernelILi128ELi128ELi1ELb1ELb1ELb0EEEvNS2_11ForwardArgsENS2_11ForwardMapsE' $b/$v > $RES/sass-$v.txt 2> $RES/sass-$v.err
  [[ -s $RES/sass-$v.txt ]] || /usr/local/cuda-13.0/bin/cuobjdump -sass $b/$v 2>/dev/null | awk '/Function : .*wgmma_forward_kernelILi128ELi128ELi1ELb1ELb1ELb0E/{p=1} p&&/Function : /&&!/wgmma_forward_kernelILi128ELi128ELi1ELb1ELb1ELb0E/{p=0} p' > $RES/sass-$v.txt
  echo "== $v: $(wc -l < $RES/sass-$v.txt) lines; order of DEPBAR / MUFU.EX2 runs / HGMMA runs:"
  grep -cE "DEPBAR|MUFU.EX2|HGMMA" $RES/sass-$v.txt
  gzip $RES/sass-$v.txt
done
timeout 120 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/flash-tests.log 2>&1; echo "flash tests rc $?"
grep -E "^\[  (PASSED|FAILED)" $RES/flash-tests.log
SAN=/usr/local/cuda-13.0/bin/compute-sanitizer
timeout 150 $SAN --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.WarpgroupAndMmaSyncKernelsAgree' > $RES/memcheck.log 2>&1; echo "memcheck rc $?"
grep -E "ERROR SUMMARY" $RES/memcheck.log
echo "at $(( $(date +%s) - t0 )) s"
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2 3; do
  timeout 120 $b/bench_attention_83b3a2d --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/a-83b3a2d-r$round.jsonl > /dev/null 2>&1
  timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/b-new-r$round.jsonl > /dev/null 2>&1
done
python3 - $RES <<'PY'
import json, sys, glob, collections
f_ = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/*-r?.jsonl")):
    v = f.split("/")[-1].rsplit("-r", 1)[0]
    for line in open(f):
        r = json.loads(line); f_[(r["shape"], v)].append(r["forward_ms"])
vs = sorted({k[1] for k in f_}); shapes = list(dict.fromkeys(k[0] for k in f_))
print("forward ms, min / max of rounds: " + " | ".join(vs))
for s in shapes: print(s, "|", " | ".join("%.3f/%.3f" % (min(f_[(s, v)]), max(f_[(s, v)])) for v in vs))
PY
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
PATHS=flash REPEATS=5 timeout 200 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
tail -9 $RES/attention/table.md | cut -d'|' -f2-9
echo "done at $(( $(date +%s) - t0 )) s"
