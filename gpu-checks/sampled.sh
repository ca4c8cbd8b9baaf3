#!/usr/bin/env bash
# GPU check of sampled-logit KD: the sampled forward KL's CUDA kernels against the float64 dense reference (f32 and
# bf16 logits, T 1 and 2, with and without the CE mix), the top-k loss's CUDA tests it shares the kernels with, and
# the sampler on GPU logits (the same draws as on the CPU). The CPU tests of the same files run too (tp 1, 2, 4 on
# Gloo thread ranks, the unbiasedness test, the cache format), and a student trained from a sampled cache on the GPU
# against the same student on the CPU.
#   gpu-checks/sampled.sh BUILD_DIR     (repo root as cwd; well under a minute on an H100)
set -uo pipefail
build=${1:?usage: gpu-checks/sampled.sh BUILD_DIR}
summary='^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure|error|Expected|Which is|actual'
echo "== losses: sampled forward KL (CPU and CUDA) and the top-k CUDA tests"
timeout 120 "$build/tests/retort_losses_tests" \
  --gtest_filter='SampledKdLoss.*:TopkDistillationCuda.*:*LossReferenceCuda*topk*' 2>&1 | grep -E "$summary" | head -150
echo "== distill: the sampler, the unbiasedness test and the sampled cache"
timeout 90 "$build/tests/retort_distill_tests" \
  --gtest_filter='TeacherSample.*:SampledKdUnbiased.*:SampledCache.*:DistillEndToEnd.*Sampled*' 2>&1 | grep -E "$summary" | head -40
