#!/usr/bin/env bash
# Call B: the wgmma backward. Flash attention GPU tests on the default kernels (wgmma both ways) and on each mma.sync
# switch, then bench_attention (flash path) on the default kernels and with the mma.sync backward.
#
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r37; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r37' EXIT
tar xJf gpu/fa2.tar.xz -C gpu; b=$PWD/gpu/fa2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_BACKWARD=mma; do
  env $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests-${v//=/-}.log | head -12
done
shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for v in default RETORT_FLASH_BACKWARD=mma; do
  env $([[ $v == default ]] || echo $v) timeout 120 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/bench-${v//=/-}.jsonl 2>&1 | grep -v '^{' | sed "s/^/$v /"
done
