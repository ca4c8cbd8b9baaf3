#!/usr/bin/env bash
# Call 24: the default that takes the one launch at 4 to 16 rows: the decode kernel tests, the whole parallel suite,
# the distillation tests that run on the GPU (on-policy rollouts decode through it), and the benchmark with every path.
cd "$(dirname "$0")/.."
RES=/tmp/r24; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r24' EXIT
tar xJf gpu/t24.tar.xz -C gpu; b=$PWD/gpu/t24; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:FoldedNormCache*:SmallMLinear*:EmbeddingSum*:AttentionWithCache*:*DecoderOps*:CudaKernels*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/core.txt | head -12
timeout 400 $b/retort_parallel_tests > $RES/par.txt 2>&1; echo "par rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/par.txt | head -12
timeout 300 $b/retort_distill_tests --gtest_filter='*Cuda*:*Gpu*' > $RES/distill.txt 2>&1; echo "distill rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/distill.txt | head -12
mkdir -p gpu/build24/bench; ln -sf $b/bench_generate gpu/build24/bench/bench_generate
EAGER=0 COMPILE=0 UNFUSED=0 ONE_LAUNCH=1 NO_GRAPHS=0 BATCHES=1,4,8,12,16,32 NEW=128 REPEATS=3 timeout 200 bash bench/run_generate_bench.sh gpu/build24 $RES/bench > $RES/bench.log 2>&1; echo "bench rc $?"
cat $RES/bench/table.md 2>/dev/null || tail -5 $RES/bench.log
