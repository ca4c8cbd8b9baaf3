#!/usr/bin/env bash
# Call 23: where the one-launch step wins: both paths at 1 to 32 rows, two rounds; then the torch.compile peer
# (reduce-overhead) at 16 and 32 rows beside both paths (bench/run_generate_bench.sh).
cd "$(dirname "$0")/.."
RES=/tmp/r23; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r23' EXIT
tar xJf gpu/t23.tar.xz -C gpu; b=$PWD/gpu/t23; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --new 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
for round in 1 2; do for L in 0 1; do
  RETORT_DECODE_LAYERS=$L timeout 100 $b/bench_generate "${shape[@]}" --batches 1,2,4,8,12,16,20,24,28,32 --repeats 2 --json $RES/cross.jsonl > $RES/cross-$L-$round.txt 2>&1; echo "layers $L round $round rc $?"
  grep -v "^{" $RES/cross-$L-$round.txt | awk 'NF==5 && $1 ~ /^[0-9]+$/ {printf "%s:%s ", $1, $4} END {print ""}'
done; done
mkdir -p gpu/build23/bench gpu/build23/tests; ln -sf $b/bench_generate gpu/build23/bench/bench_generate
EAGER=0 COMPILE=1 UNFUSED=0 ONE_LAUNCH=1 NO_GRAPHS=0 BATCHES=16,32 NEW=128 REPEATS=3 COMPILE_TIMEOUT=150 timeout 420 bash bench/run_generate_bench.sh gpu/build23 $RES/peer > $RES/peer.log 2>&1; echo "peer rc $?"
cat $RES/peer/table.md 2>/dev/null || tail -5 $RES/peer.log
