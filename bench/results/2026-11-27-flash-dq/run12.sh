#!/usr/bin/env bash
# The backward's loads by the copy engine (TMA maps of Q, dO, K, V, lse and Dvec; default) against every thread's
# cp.async (RETORT_FLASH_BACKWARD_LOADS=cp.async): the flash tests (and memcheck), both in one binary at the nine
# shapes (two rounds), SDPA.
cd "$(dirname "$0")/.."
RES=/tmp/r12; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r12' EXIT
tar xJf gpu/fb12.tar.xz -C gpu; b=$PWD/gpu/fb12; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests.log 2>&1
echo "tests rc $?: $(grep -c '^\[       OK' $RES/tests.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests.log | head -12
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do for v in tma cp.async; do
  env $([[ $v == tma ]] || echo RETORT_FLASH_BACKWARD_LOADS=$v) timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/$v-r$round.jsonl 2>&1 | grep -v '^{' | grep -v "causal attention on\|BxTxHxKVxD" | sed "s/^/$v$round /"
done; done
timeout 240 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.*' > $RES/memcheck.log 2>&1
echo "memcheck rc $?"; tail -2 $RES/memcheck.log
