#!/usr/bin/env bash
# Call 27: device_runtime::capturing through cuda::stream_capturing: the fold-cache, decode kernel and model tests.
cd "$(dirname "$0")/.."
RES=/tmp/r27; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r27' EXIT
tar xJf gpu/t27.tar.xz -C gpu; b=$PWD/gpu/t27; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:FoldedNormCache*:CudaGraph*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" $RES/core.txt | head -8
timeout 300 $b/retort_parallel_tests --gtest_filter='DecodeFused*:DecodeStep*:Generator*' > $RES/par.txt 2>&1; echo "par rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" $RES/par.txt | head -8
