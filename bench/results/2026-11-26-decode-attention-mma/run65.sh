#!/usr/bin/env bash
# Call I (the final code: the two cache attentions share their L2 prefetch): the cache attention, decode kernel and
# decode model tests on the GPU, under both cache attentions, and GPT-2 small's generation at batch 32 both ways.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r65; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r65' EXIT
tar xJf gpu/da7.tar.xz -C gpu; b=$PWD/gpu/da7; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for k in auto lanes mma; do
  if [[ $k == auto ]]; then unset RETORT_DECODE_ATTENTION; else export RETORT_DECODE_ATTENTION=$k; fi
  timeout 150 $b/tests/retort_core_tests --gtest_filter='AttentionWithCache*:SmallMLinear.*:EmbeddingSum.*' > $RES/tests-core-$k.log 2>&1; echo "core $k rc $?: $(grep -c '^\[       OK' $RES/tests-core-$k.log) ok"
  timeout 200 $b/tests/retort_parallel_tests --gtest_filter='DecodeFused.*:DecodeStep.*:InferenceCopy.*:GeneratorCuda.*:GptKvCacheCuda.*:VocabSamplerCuda.*:GptCuda.*:*Llama*:*Generat*' > $RES/tests-parallel-$k.log 2>&1; echo "parallel $k rc $?: $(grep -c '^\[       OK' $RES/tests-parallel-$k.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-parallel-$k.log) skipped"
  grep -hE '^\[  FAILED  \]|Failure' $RES/tests-core-$k.log $RES/tests-parallel-$k.log | sort -u | head
done
unset RETORT_DECODE_ATTENTION
env NEW=128 REPEATS=3 BATCHES=32 UNFUSED=0 LANES=1 NO_GRAPHS=0 EAGER=0 COMPILE=0 \
  timeout 200 bash bench/run_generate_bench.sh $b $RES/bench > $RES/bench.log 2>&1; echo "bench rc $?"
python3 -c "
import json
for r in map(json.loads, open('$RES/bench/retort.jsonl')): print(r['framework'], r['batch'], round(r['ms_per_step'],4))"
