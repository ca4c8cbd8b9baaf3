#!/usr/bin/env bash
# The forward with a producer warpgroup (RETORT_FLASH_FORWARD_SCHEDULE=producer, this build only, not kept:
# forward-producer.patch; 128 more threads issue every copy with 40 registers, the two computing warpgroups 232 each)
# against the defaults (pipelined at head size 128, lockstep at 64): the flash tests (and memcheck), both in one
# binary at the nine shapes (two rounds), and the attention benchmark with SDPA for each (attention-default: the
# kept kernels of 50d2302, unchanged by the patch).
cd "$(dirname "$0")/.."
RES=/tmp/r8; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r8' EXIT
tar xJf gpu/fb8.tar.xz -C gpu; b=$PWD/gpu/fb8; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests.log 2>&1
echo "tests rc $?: $(grep -c '^\[       OK' $RES/tests.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests.log | head -12
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do for v in default producer; do
  env $([[ $v == default ]] || echo RETORT_FLASH_FORWARD_SCHEDULE=$v) timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/$v-r$round.jsonl 2>&1 | grep -v '^{' | grep -v "causal attention on\|BxTxHxKVxD" | sed "s/^/$v$round /"
done; done
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
for v in default producer; do
  env $([[ $v == default ]] || echo RETORT_FLASH_FORWARD_SCHEDULE=$v) PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention-$v > $RES/attention-$v.log 2>&1; echo "attention bench $v rc $?"
  tail -9 $RES/attention-$v/table.md | cut -d'|' -f2-9
done
RETORT_FLASH_FORWARD_SCHEDULE=producer timeout 240 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.WarpgroupAndMmaSyncKernelsAgree' > $RES/memcheck.log 2>&1
echo "memcheck rc $?"; tail -3 $RES/memcheck.log
