#!/usr/bin/env bash
# Call 21: the attention's batched softmax: tests, both paths, the batch-32 profile, then Nsight Compute (source level)
# on one batch-32 launch.
cd "$(dirname "$0")/.."
RES=/tmp/r21; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r21' EXIT
tar xJf gpu/t21.tar.xz -C gpu; b=$PWD/gpu/t21; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:FoldedNormCache*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|error" $RES/core.txt | head -20
timeout 300 $b/retort_parallel_tests --gtest_filter='DecodeFused*:DecodeStep*' > $RES/par.txt 2>&1; echo "par rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|error" $RES/par.txt | head -20
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --new 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
for L in 0 1; do
  RETORT_DECODE_LAYERS=$L timeout 100 $b/bench_generate "${shape[@]}" --batches 1,16,32 --repeats 3 --json $RES/bench.jsonl > $RES/bench-$L.txt 2>&1; echo "layers $L rc $?"; grep -v "^{" $RES/bench-$L.txt | tail -3
done
RETORT_DECODE_LAYERS=1 RETORT_DECODE_LAYERS_PROFILE=1 timeout 60 $b/bench_generate "${shape[@]}" --batches 32 --repeats 1 --graphs false > $RES/profile-32.txt 2>&1; echo "profile rc $?"
tail -1 $RES/profile-32.txt | python3 -c "
import json,sys
d=json.loads(sys.stdin.read())
for key in ['gpt_decode_layers_phase_us','staged_us','worked_us']:
  v=d[key]; print(key, [round(sum(v[5*l+p] for l in range(1,12))/11,2) for p in range(5)], 'sum', round(sum(v),1))
print('empty', d['empty_barrier_us'], 'steps', d['steps'])"
RETORT_DECODE_LAYERS=1 timeout 300 ncu --kernel-name regex:gpt_decode_layers --launch-skip 5 --launch-count 1 --set full --import-source yes -o $RES/prof $b/bench_generate "${shape[@]}" --batches 32 --new 12 --repeats 1 --graphs false > $RES/ncu.log 2>&1; echo "ncu rc $?"; tail -2 $RES/ncu.log
ncu --import $RES/prof.ncu-rep --page details > $RES/details.txt 2>&1
ncu --import $RES/prof.ncu-rep --page source --csv --print-source sass > $RES/sass.csv 2>&1
gzip $RES/sass.csv; rm -f $RES/prof.ncu-rep
grep -E "Duration|Registers|Achieved|Issue Slots|No Eligible|L2 Hit|DRAM Throughput|Local" $RES/details.txt | head -20
