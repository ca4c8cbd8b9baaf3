#!/usr/bin/env bash
# The forward's loads by the copy engine (TMA tensor maps, thread 0 issuing a tile's boxes; in this build the default at
# head size 128, RETORT_FLASH_FORWARD_SCHEDULE=tma at 64) against every thread's cp.async (pipelined) and the lockstep
# default at 64 then: the flash tests (and memcheck), the schedules in one binary at the nine shapes (two rounds), SDPA.
cd "$(dirname "$0")/.."
RES=/tmp/r9; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r9' EXIT
tar xJf gpu/fb9.tar.xz -C gpu; b=$PWD/gpu/fb9; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests.log 2>&1
echo "tests rc $?: $(grep -c '^\[       OK' $RES/tests.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests.log | head -12
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do for v in default pipelined tma; do
  env $([[ $v == default ]] || echo RETORT_FLASH_FORWARD_SCHEDULE=$v) timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/$v-r$round.jsonl 2>&1 | grep -v '^{' | grep -v "causal attention on\|BxTxHxKVxD" | sed "s/^/$v$round /"
done; done
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
tail -9 $RES/attention/table.md | cut -d'|' -f2-9
timeout 240 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.WarpgroupAndMmaSyncKernelsAgree:CudaFlashAttention.PackedProjectionsAreReadInPlace' > $RES/memcheck.log 2>&1
echo "memcheck rc $?"; tail -3 $RES/memcheck.log
