#!/usr/bin/env bash
# Call A: the tensor-core cache attention (core/kernels/cuda/attention_cache_mma.cu). Its tests and every decode and
# generation test on the GPU; Nsight Compute on one batch-32 decode attention of each kernel and the kernel times of
# one batch-32 decode step; the generation benchmark at batches 1, 8, 16, 32 with the CUDA-core attention
# (retort-lanes-attention) and torch.compile reduce-overhead in the same call.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r57; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r57' EXIT
tar xJf gpu/da1.tar.xz -C gpu; b=$PWD/gpu/da1; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 150 $b/tests/retort_core_tests --gtest_filter='AttentionWithCache*:SmallMLinear.*:EmbeddingSum.*' > $RES/tests-core.log 2>&1; echo "core rc $?: $(grep -c '^\[       OK' $RES/tests-core.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-core.log) skipped"
grep -hE '^\[  FAILED  \]|Failure|vs float64' $RES/tests-core.log | head -20
timeout 200 $b/tests/retort_parallel_tests --gtest_filter='DecodeFused.*:DecodeStep.*:InferenceCopy.*:GeneratorCuda.*:GptKvCacheCuda.*:VocabSamplerCuda.*:GptCuda.*:*Llama*:*Generat*' > $RES/tests-parallel.log 2>&1; echo "parallel rc $?: $(grep -c '^\[       OK' $RES/tests-parallel.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-parallel.log) skipped"
grep -hE '^\[  FAILED  \]' $RES/tests-parallel.log | sort -u | head
for k in mma lanes; do
  RETORT_DECODE_ATTENTION=$k timeout 90 ncu --kernel-name regex:decode_kernel --launch-skip 24 --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy \
    --metrics smsp__inst_executed.sum,gpu__time_duration.sum $b/bench/bench_generate --batches 32 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu-attention-$k.txt 2>&1; echo "ncu $k rc $?"
  grep -E "decode_kernel|Duration|DRAM Throughput|inst_executed|Registers Per|Achieved Occupancy" $RES/ncu-attention-$k.txt | sed 's/(const.*//' | head -8
done
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv $b/bench/bench_generate \
  --batches 32 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu-fused.csv 2> $RES/ncu-fused.err; echo "ncu step rc $?"
python3 bench/results/2026-11-26-h100-decode-fused/ncu_step.py $RES | head -14
env NEW=128 REPEATS=3 BATCHES=1,8,16,32 UNFUSED=0 LANES=1 NO_GRAPHS=0 EAGER=0 COMPILE=1 COMPILE_TIMEOUT=300 \
  timeout 420 bash bench/run_generate_bench.sh $b $RES/bench > $RES/bench.log 2>&1; echo "bench rc $?"
cat $RES/bench/table.md 2>/dev/null || tail -20 $RES/bench.log
grep -h '"framework"' $RES/bench/retort.jsonl | python3 -c "import sys,json; [print(r['framework'], r['batch'], round(r['ms_per_step'],4), round(r['decode_tokens_per_s'],1)) for r in map(json.loads, sys.stdin)]"
