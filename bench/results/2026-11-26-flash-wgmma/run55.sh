#!/usr/bin/env bash
# Call T: the forward's warpgroups taking turns to issue a tile's products (named barrier), against call R's
# build (fa14) in one call: the flash path at the nine shapes, each build twice, and the
# tests on the new one under every switch.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r55; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r55' EXIT
for x in fa14 fa16; do tar xJf gpu/$x.tar.xz -C gpu; done; b=$PWD/gpu/fa16
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma RETORT_FLASH_ROWS=16 RETORT_FLASH_KEYS=64 RETORT_FLASH_KEYS=128; do
  env LD_LIBRARY_PATH=$b/devlibs $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*:Ops/OpCudaVsCpu.*/causal*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is" $RES/tests-${v//=/-}.log | head -8
done
shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for x in fa14 fa16 fa14 fa16; do
  LD_LIBRARY_PATH=$PWD/gpu/$x/devlibs timeout 120 gpu/$x/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/bench-$x.jsonl 2>&1 | grep -v '^{' | grep -v BxT | sed "s/^/$x /"
done
