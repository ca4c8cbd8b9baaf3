#!/usr/bin/env bash
# The pipelined backward with a CTA a query head and a pair of key tiles (dK, dV added up over the group in float32;
# this build only, not kept: docs/benchmarks.md) against a CTA a key/value head (RETORT_FLASH_BACKWARD_GRID=kv): the
# flash tests (and under compute-sanitizer), both grids in one binary at the nine shapes (two rounds), SDPA.
cd "$(dirname "$0")/.."
RES=/tmp/r5; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r5' EXIT
tar xJf gpu/fb5.tar.xz -C gpu; b=$PWD/gpu/fb5; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests.log 2>&1
echo "tests rc $?: $(grep -c '^\[       OK' $RES/tests.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests.log | head -12
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do for v in heads kv; do
  env RETORT_FLASH_BACKWARD_GRID=$v timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/$v-r$round.jsonl 2>&1 | grep -v '^{' | grep -v "causal attention on\|BxTxHxKVxD" | sed "s/^/$v$round /"
done; done
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
cat $RES/attention/table.md | tail -9
timeout 240 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.WarpgroupAndMmaSyncKernelsAgree' > $RES/memcheck.log 2>&1
echo "memcheck rc $?"; tail -3 $RES/memcheck.log
