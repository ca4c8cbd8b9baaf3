#!/usr/bin/env bash
# Call 22: the profile with the slowest CTA's marks, then Nsight Compute (source level) on one batch-32 launch.
# on one batch-32 launch.
cd "$(dirname "$0")/.."
RES=/tmp/r22; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r22' EXIT
tar xJf gpu/t22.tar.xz -C gpu; b=$PWD/gpu/t22; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
RETORT_DECODE_LAYERS=1 RETORT_DECODE_LAYERS_PROFILE=1 timeout 60 $b/bench_generate "${shape[@]}" --batches 32 --new 128 --repeats 1 --graphs false > $RES/profile-32.txt 2>&1; echo "profile rc $?"
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
