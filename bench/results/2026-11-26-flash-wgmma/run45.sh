#!/usr/bin/env bash
# Call J: the wgmma backward at head size 64 with one warpgroup a CTA (64 keys, three CTAs a multiprocessor, no
# barrier between warpgroups). The flash attention tests under every switch, then the flash path with the new
# default and with RETORT_FLASH_BACKWARD_KEYS=128 (two warpgroups, as in call I) at the head-size-64 shapes, and the
# attention benchmark against PyTorch SDPA.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r45; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r45' EXIT
tar xJf gpu/fa7.tar.xz -C gpu; b=$PWD/gpu/fa7; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_BACKWARD_KEYS=128 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma; do
  env $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*:Ops/OpCudaVsCpu.*/causal*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is" $RES/tests-${v//=/-}.log | head -8
done
hd64=16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for v in default RETORT_FLASH_BACKWARD_KEYS=128; do
  env $([[ $v == default ]] || echo $v) timeout 120 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $hd64 --json $RES/bench-hd64-${v//=/-}.jsonl 2>&1 | grep -v '^{' | sed "s/^/$v /"
done
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $? at $(( $(date +%s) - t0 )) s"
cat $RES/attention/table.md
