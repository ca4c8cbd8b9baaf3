#!/usr/bin/env bash
# Call E: after the wide-row fix (small_m_linear takes rows of up to 96 KiB; the models check their widest product
# input): the decode kernel and model tests on the GPU, then decoding the Llama-3.2-1B-shaped model (32 query heads
# over 8 key/value heads, head size 64, SwiGLU 8192; random init, bf16, prompt 128, 128 new tokens) at batches 1, 8,
# 16, 32 with the tensor-core cache attention (default) and the CUDA-core one (RETORT_DECODE_ATTENTION=lanes), two
# rounds each, from one binary.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r61; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r61' EXIT
tar xJf gpu/da5.tar.xz -C gpu; b=$PWD/gpu/da5; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 150 $b/tests/retort_core_tests --gtest_filter='AttentionWithCache*:SmallMLinear.*:EmbeddingSum.*' > $RES/tests-core.log 2>&1; echo "core rc $?: $(grep -c '^\[       OK' $RES/tests-core.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-core.log) skipped"
grep -hE '^\[  FAILED  \]|Failure' $RES/tests-core.log | head -10
timeout 200 $b/tests/retort_parallel_tests --gtest_filter='DecodeFused.*:DecodeStep.*:InferenceCopy.*:GeneratorCuda.*:GptKvCacheCuda.*:VocabSamplerCuda.*:GptCuda.*:*Llama*:*Generat*' > $RES/tests-parallel.log 2>&1; echo "parallel rc $?: $(grep -c '^\[       OK' $RES/tests-parallel.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-parallel.log) skipped"
grep -hE '^\[  FAILED  \]' $RES/tests-parallel.log | sort -u | head
llama=(--label llama-1b-shape --family llama --vocab 128256 --context 1024 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000)
for round in 1 2; do
  for k in auto lanes; do
    if [[ $k == lanes ]]; then export RETORT_DECODE_ATTENTION=lanes; else unset RETORT_DECODE_ATTENTION; fi
    timeout 200 $b/bench/bench_generate "${llama[@]}" --batches 1,8,16,32 --prompt 128 --new 128 --repeats 3 --json $RES/llama.jsonl > $RES/llama-$k-$round.log 2>&1; echo "llama $k round $round rc $?"
  done
done
unset RETORT_DECODE_ATTENTION
python3 -c "
import json
for r in map(json.loads, open('$RES/llama.jsonl')): print('llama', r['framework'], r['batch'], round(r['ms_per_step'],4), round(r['decode_tokens_per_s'],1), r['graph_nodes'])"
