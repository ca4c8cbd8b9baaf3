#!/usr/bin/env bash
# Call 25: the distillation tests that run on the GPU, with the fortunes corpus they read (call 24 lacked it).
cd "$(dirname "$0")/.."
RES=/tmp/r25; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r25' EXIT
tar xJf gpu/t24.tar.xz -C gpu; b=$PWD/gpu/t24; export LD_LIBRARY_PATH=$b/devlibs
mkdir -p /usr/share/games && tar xJf gpu/fortunes.tar.xz -C /usr/share/games
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 400 $b/retort_distill_tests --gtest_filter='*Cuda*:*Gpu*' > $RES/distill.txt 2>&1; echo "distill rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[       OK|Failure|Expected|Which is" $RES/distill.txt | head -20
