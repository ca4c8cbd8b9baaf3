#!/usr/bin/env bash
# Call A: the tensor-core decode products (small_m_linear_mma.cu): kernel and model tests on the GPU, the decode
# benchmark at batches 1..32 fused vs unfused, the crossing row count, and Nsight Compute's kernel times of one
# batch-32 step on the fused path.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r26; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r26' EXIT
tar xJf gpu/a.tar.xz -C gpu; b=$PWD/gpu/a; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
PEERS=0 BATCHES=1,4,8,16,32 timeout 330 bash gpu-checks/decode-fused.sh $b $RES/decode 2>&1 | tee $RES/decode.log | grep -E "PASS|FAIL|^\| |bench rc|Failure|error" | head -40
shape=(--vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768 --prompt 128 --new 128 --repeats 3)
for rows in 1 33; do
  RETORT_DECODE_MMA_MIN_ROWS=$rows timeout 60 $b/bench/bench_generate "${shape[@]}" --batches 2,4,8 --label mma-min-$rows --json $RES/mma-min.jsonl > $RES/mma-min-$rows.log 2>&1; echo "mma-min $rows rc $?"
done
grep -h tokens_per_s $RES/mma-min.jsonl | python3 -c "import sys,json
for l in sys.stdin:
  d=json.loads(l); print(d.get('label'), d.get('batch'), d.get('decode_ms_per_step', d.get('ms_per_step')), d.get('decode_tokens_per_s', d.get('tokens_per_s')))" 2>&1 | head
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv $b/bench/bench_generate \
  --batches 32 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu-fused.csv 2> $RES/ncu-fused.err; echo "ncu rc $?"
python3 bench/results/2026-11-26-h100-decode-fused/ncu_step.py $RES | head -24
