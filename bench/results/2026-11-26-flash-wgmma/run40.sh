#!/usr/bin/env bash
# Call E: the wgmma kernels with their overlaps (forward: P V of tile j - 1 behind S of tile j; backward: the previous
# step's dQ atomics beside the next step's first products; copies with their address math done once). GPU tests on
# the default kernels and each mma.sync switch, then the attention benchmark: retort's flash path with the default
# kernels, the mma.sync forward and the mma.sync backward, and PyTorch SDPA in the same call.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r40; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r40' EXIT
tar xJf gpu/fa3.tar.xz -C gpu; b=$PWD/gpu/fa3; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma; do
  env $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests-${v//=/-}.log | head -12
done
shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for v in RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma; do
  env $v timeout 120 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/bench-${v//=/-}.jsonl 2>&1 | grep -v '^{' | sed "s/^/$v /"
done
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
cat $RES/attention/table.md
