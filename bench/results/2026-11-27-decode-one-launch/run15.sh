#!/usr/bin/env bash
# Call 15: after the launch facts were shared (kernel_facts.cuh): the decode tests and both decode paths once.
cd "$(dirname "$0")/.."
RES=/tmp/r15; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r15' EXIT
tar xJf gpu/t12.tar.xz -C gpu; b=$PWD/gpu/t12; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:SmallMLinear*:EmbeddingSum*:AttentionWithCache*:CudaKernels*:*DecoderOps*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/core.txt | head -20
timeout 300 $b/retort_parallel_tests --gtest_filter='DecodeFused*:GeneratorCuda*:DecodeStep*:GptKvCacheCuda*:InferenceCopy*:VocabSamplerCuda*:GptCuda*' > $RES/par.txt 2>&1; echo "par rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/par.txt | head -20
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --new 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
for L in 0 1; do
  RETORT_DECODE_LAYERS=$L timeout 100 $b/bench_generate "${shape[@]}" --batches 1,8,16,32 --repeats 3 --json $RES/bench.jsonl > $RES/bench-$L.txt 2>&1; echo "layers $L rc $?"; grep -v "^{" $RES/bench-$L.txt | tail -4
done
