#!/usr/bin/env bash
# Call 14: Nsight Compute on one batch-32 launch of the final one-launch kernel (RETORT_DECODE_LAYERS=1), source-level.
cd "$(dirname "$0")/.."
RES=/tmp/r14; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r14' EXIT
tar xJf gpu/t9.tar.xz -C gpu; b=$PWD/gpu/t9; export LD_LIBRARY_PATH=$b/devlibs
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
RETORT_DECODE_LAYERS=1 timeout 400 ncu --kernel-name regex:gpt_decode_layers --launch-skip 5 --launch-count 1 --set full --import-source yes -o $RES/prof $b/bench_generate "${shape[@]}" --batches 32 --new 12 --repeats 1 --graphs false > $RES/ncu.log 2>&1; echo "ncu rc $?"; tail -3 $RES/ncu.log
ncu --import $RES/prof.ncu-rep --page details > $RES/details.txt 2>&1
ncu --import $RES/prof.ncu-rep --page source --csv --print-source sass > $RES/sass.csv 2>&1
gzip $RES/sass.csv; rm -f $RES/prof.ncu-rep
grep -E "Duration|Registers|Achieved|Issue Slots|No Eligible|Stall|L2 Hit|DRAM Throughput|Memory Throughput" $RES/details.txt | head -30
