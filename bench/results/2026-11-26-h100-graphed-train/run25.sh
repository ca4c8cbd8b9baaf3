#!/usr/bin/env bash
# Call T: after AdamW::advance_step stamps the working copies directly: the optimizer's GPU tests and the graphed step.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r25; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r25' EXIT
tar xJf gpu/o.tar.xz -C gpu; b=$PWD/gpu/o; export LD_LIBRARY_PATH=$b/devlibs
timeout 100 $b/tests/retort_optim_tests --gtest_filter='*Cuda*:AdamW*:GradNorm*' > $RES/tests-optim.log 2>&1; echo "optim rc $?: $(grep -c '^\[       OK' $RES/tests-optim.log) ok"
timeout 100 $b/tests/retort_distill_tests --gtest_filter='Graphed*' > $RES/tests-distill.log 2>&1; echo "distill rc $?: $(grep -c '^\[       OK' $RES/tests-distill.log) ok"
grep -hE '^\[  FAILED  \]' $RES/tests-*.log | sort -u | head; true
