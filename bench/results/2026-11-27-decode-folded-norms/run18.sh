#!/usr/bin/env bash
# Call 18: the kernel test's illegal address under compute-sanitizer.
cd "$(dirname "$0")/.."
RES=/tmp/r18; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r18' EXIT
tar xJf gpu/t18.tar.xz -C gpu; b=$PWD/gpu/t18; export LD_LIBRARY_PATH=$b/devlibs
timeout 100 $b/retort_core_tests --gtest_filter='GptDecodeLayers*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|error|Trace|B [0-9]" $RES/core.txt | head -20
CS=$(ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1); echo "sanitizer $CS"
timeout 300 $CS --print-limit 5 $b/retort_core_tests --gtest_filter='GptDecodeLayers.MatchesFloat64MathOnGpu' > $RES/san.txt 2>&1; echo "san rc $?"
head -60 $RES/san.txt
