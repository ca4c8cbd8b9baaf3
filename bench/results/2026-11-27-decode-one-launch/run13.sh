#!/usr/bin/env bash
# Call 13: the GPU tests of the decode paths at the final tree (the kernel as in call 11, the tests' helpers shared).
cd "$(dirname "$0")/.."
RES=/tmp/r13; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r13' EXIT
tar xJf gpu/t11.tar.xz -C gpu; b=$PWD/gpu/t11; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:SmallMLinear*:EmbeddingSum*:AttentionWithCache*:CudaKernels*:*DecoderOps*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/core.txt | head -20
timeout 300 $b/retort_parallel_tests --gtest_filter='DecodeFused*:GeneratorCuda*:DecodeStep*:GptKvCacheCuda*:InferenceCopy*:VocabSamplerCuda*:GptCuda*' > $RES/par.txt 2>&1; echo "par rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/par.txt | head -20
