#!/usr/bin/env bash
# Call 26: after the review (folds during a capture not kept, alignment checks): the decode kernel, fold-cache and
# model tests, and the default decode path once more.
cd "$(dirname "$0")/.."
RES=/tmp/r26; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r26' EXIT
tar xJf gpu/t26.tar.xz -C gpu; b=$PWD/gpu/t26; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:FoldedNormCache*:SmallMLinear*:EmbeddingSum*:AttentionWithCache*:*DecoderOps*:CudaKernels*:CudaGraph*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/core.txt | head -12
timeout 300 $b/retort_parallel_tests --gtest_filter='DecodeFused*:DecodeStep*:Generator*:GptKvCache*:InferenceCopy*:GptCuda*:VocabSampler*' > $RES/par.txt 2>&1; echo "par rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/par.txt | head -12
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --new 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
timeout 100 $b/bench_generate "${shape[@]}" --batches 1,4,8,16,32 --repeats 3 --json $RES/bench.jsonl > $RES/bench.txt 2>&1; echo "bench rc $?"; grep -v "^{" $RES/bench.txt | tail -5
