#!/usr/bin/env bash
# Call 19: call 17 again after the fix of the lanes past the rows (compute-sanitizer clean first).
# barrier: the decode tests, both decode paths, the batch-32 phase profile.
cd "$(dirname "$0")/.."
RES=/tmp/r19; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r19' EXIT
tar xJf gpu/t19.tar.xz -C gpu; b=$PWD/gpu/t19; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
CS=$(ls /usr/local/cuda*/bin/compute-sanitizer | head -1); timeout 200 $CS --print-limit 5 $b/retort_core_tests --gtest_filter='GptDecodeLayers.MatchesFloat64MathOnGpu' > $RES/san.txt 2>&1; echo "san rc $?"; grep -E "ERROR SUMMARY|Invalid" $RES/san.txt | head -5
timeout 200 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:FoldedNormCache*:SmallMLinear*:EmbeddingSum*:AttentionWithCache*:*DecoderOps*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|error" $RES/core.txt | head -20
timeout 300 $b/retort_parallel_tests --gtest_filter='DecodeFused*:GeneratorCuda*:DecodeStep*:GptKvCacheCuda*:InferenceCopy*:GptCuda*' > $RES/par.txt 2>&1; echo "par rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|error" $RES/par.txt | head -20
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --new 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
for L in 0 1; do
  RETORT_DECODE_LAYERS=$L timeout 100 $b/bench_generate "${shape[@]}" --batches 1,8,16,32 --repeats 3 --json $RES/bench.jsonl > $RES/bench-$L.txt 2>&1; echo "layers $L rc $?"; grep -v "^{" $RES/bench-$L.txt | tail -4
done
for B in 32 1; do
RETORT_DECODE_LAYERS=1 RETORT_DECODE_LAYERS_PROFILE=1 timeout 60 $b/bench_generate "${shape[@]}" --batches $B --repeats 1 --graphs false > $RES/profile-$B.txt 2>&1; echo "profile $B rc $?"
tail -1 $RES/profile-$B.txt | python3 -c "
import json,sys
d=json.loads(sys.stdin.read())
for key in ['gpt_decode_layers_phase_us','staged_us','worked_us']:
  v=d[key]; print(key, [round(sum(v[5*l+p] for l in range(1,12))/11,2) for p in range(5)], 'sum', round(sum(v),1))
print('empty', d['empty_barrier_us'], 'steps', d['steps'])"
done
