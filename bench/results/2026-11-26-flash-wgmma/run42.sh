#!/usr/bin/env bash
# Call G: the backward's dQ through shared memory and bulk reductions (no per-thread atomics), descriptors built
# once and advanced. GPU tests on the default kernels and each mma.sync switch; the flash path of this build and of
# call E's build (fa3) side by side; the attention benchmark against PyTorch SDPA.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r42; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r42' EXIT
for x in fa3 fa4; do tar xJf gpu/$x.tar.xz -C gpu; done; b=$PWD/gpu/fa4; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma; do
  env $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests-${v//=/-}.log | head -12
done
shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for x in fa3 fa4; do
  LD_LIBRARY_PATH=$PWD/gpu/$x/devlibs timeout 120 gpu/$x/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/bench-$x.jsonl 2>&1 | grep -v '^{' | sed "s/^/$x /"
done
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
cat $RES/attention/table.md
