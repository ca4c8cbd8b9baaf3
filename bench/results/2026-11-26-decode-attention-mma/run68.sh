#!/usr/bin/env bash
# Call L (the final code: the mma fragment helpers shared through ptx.cuh): the flash attention tests on the default
# (wgmma) kernels and under the mma.sync switches, the cache attention tests under both kernels, and the decode tests.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r68; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r68' EXIT
tar xJf gpu/da9.tar.xz -C gpu; b=$PWD/gpu/da9; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in RETORT_NONE=0 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma RETORT_DECODE_ATTENTION=lanes RETORT_DECODE_ATTENTION=mma; do
  env $v timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*:AttentionWithCache*:SmallMLinear.*' > $RES/core-${v//=/-}.log 2>&1
  echo "core tests $v rc $?: $(grep -c '^\[       OK' $RES/core-${v//=/-}.log) ok, $(grep -c '^\[  SKIPPED' $RES/core-${v//=/-}.log) skipped"; grep -E "^\[  FAILED|Failure" $RES/core-${v//=/-}.log | head -5
done
timeout 200 $b/tests/retort_parallel_tests --gtest_filter='DecodeFused.*:DecodeStep.*:InferenceCopy.*:GeneratorCuda.*:GptKvCacheCuda.*:GptCuda.*:*Generat*' > $RES/parallel.log 2>&1
echo "parallel rc $?: $(grep -c '^\[       OK' $RES/parallel.log) ok, $(grep -c '^\[  SKIPPED' $RES/parallel.log) skipped"; grep -E "^\[  FAILED|Failure" $RES/parallel.log | head -5
