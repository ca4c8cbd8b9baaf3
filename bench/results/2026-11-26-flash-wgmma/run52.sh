#!/usr/bin/env bash
# Call Q: the backward's dQ with 8-byte atomics of each lane's own pairs (no shuffles) against the 16-byte ones
# (call N's build, fa11) in one call: the flash path at the nine shapes, each build twice, and the tests on the new one.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r52; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r52' EXIT
for x in fa11 fa13; do tar xJf gpu/$x.tar.xz -C gpu; done; b=$PWD/gpu/fa13
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_BACKWARD_KEYS=64 RETORT_FLASH_BACKWARD=mma; do
  env LD_LIBRARY_PATH=$b/devlibs $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*:Ops/OpCudaVsCpu.*/causal*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is" $RES/tests-${v//=/-}.log | head -8
done
shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for x in fa11 fa13 fa11 fa13; do
  LD_LIBRARY_PATH=$PWD/gpu/$x/devlibs timeout 120 gpu/$x/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/bench-$x.jsonl 2>&1 | grep -v '^{' | grep -v BxT | sed "s/^/$x /"
done
