#!/usr/bin/env bash
# dQ accumulator layouts of the pipelined backward (this build's switch values; run4.sh has the kept ones):
# fragments (v4 atomics in register order), rows (v2 atomics, row order), tiles (row order in shared memory, one bulk
# reduction a warpgroup and step); the flash tests, then the three in one binary at the nine shapes, two rounds.
cd "$(dirname "$0")/.."
RES=/tmp/r3; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r3' EXIT
tar xJf gpu/fb3.tar.xz -C gpu; b=$PWD/gpu/fb3; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests.log 2>&1
echo "tests rc $?: $(grep -c '^\[       OK' $RES/tests.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests.log | head -12
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do for v in fragments rows tiles; do
  env RETORT_FLASH_BACKWARD_DQ=$v timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/$v-r$round.jsonl 2>&1 | grep -v '^{' | sed "s/^/$v$round /"
done; done
