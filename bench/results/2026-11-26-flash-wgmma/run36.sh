#!/usr/bin/env bash
# Call A: the wgmma forward of the fused attention. The operand probe (gpu/wgmma_probe.cu: S = Q K^T and O = P V
# through wgmma.cuh against float64), the flash attention GPU tests on the default (wgmma) and mma.sync forwards,
# then bench_attention's flash path with each forward on the nine shapes.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r36; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r36' EXIT
tar xJf gpu/fa1.tar.xz -C gpu; b=$PWD/gpu/fa1; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 30 $b/wgmma_probe 2>&1 | tee $RES/probe.log
for v in default RETORT_FLASH_FORWARD=mma; do
  env $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests-${v//=/-}.log | head -12
done
shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for v in default RETORT_FLASH_FORWARD=mma; do
  env $([[ $v == default ]] || echo $v) timeout 120 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/bench-${v//=/-}.jsonl 2>&1 | grep -v '^{' | sed "s/^/$v /"
done
