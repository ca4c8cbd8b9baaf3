#!/usr/bin/env bash
# Call N: two eager steps before recording (the arena sized in the steady state); otherwise as call M (run18): the graphed step with arenas of the eager peak plus a sixteenth and the stale marks inside the
# recorded work: its tests, GPT-2 b16 / b8 eager and graphed, a Llama-3.2-1B-shaped model at 4 x 2048 eager and
# graphed, and the toy trainer with train.cuda_graphs auto.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -e /work/main ]] || { mkdir -p /work && ln -s "$PWD" /work/main; }
t0=$(date +%s)
RES=/tmp/r19; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r19' EXIT
tar xJf gpu/f2.tar.xz -C gpu; b=$PWD/gpu/f2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 100 $b/tests/retort_optim_tests --gtest_filter='*Cuda*:AdamW*:GradNorm*' > $RES/tests-optim.log 2>&1; echo "optim rc $?: $(grep -c '^\[       OK' $RES/tests-optim.log) ok"
timeout 100 $b/tests/retort_distill_tests --gtest_filter='Graphed*' > $RES/tests-distill.log 2>&1; echo "distill rc $?: $(grep -c '^\[       OK' $RES/tests-distill.log) ok"
timeout 100 $b/tests/retort_core_tests --gtest_filter='StaleGradients.*:ArenaOffsets.*:CaptureArena*' > $RES/tests-core.log 2>&1; echo "core rc $?: $(grep -c '^\[       OK' $RES/tests-core.log) ok"
grep -hE '^\[  FAILED  \]|fell back' $RES/tests-*.log | sort -u | head
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10)
for bs in 16 8; do
  timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-eager --batch $bs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-eager-$bs.err; echo "eager b$bs rc $?"
  RETORT_LOG_LEVEL=info timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-graphs --batch $bs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs-$bs.err; echo "graphs b$bs rc $?"
  grep "CUDA graph" $RES/train-graphs-$bs.err | cut -c1-260
done
L=(--batch 4 --seq 2048 --vocab 128256 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000 --warmup 2 --steps 5)
timeout 120 $b/bench/bench_train_throughput --label llama-1b-b4-eager --device cuda --dtype bf16 --family llama "${L[@]}" >> $RES/train.jsonl 2> $RES/llama-eager.err; echo "llama eager rc $?"
RETORT_LOG_LEVEL=info timeout 120 $b/bench/bench_train_throughput --label llama-1b-b4-graphs --device cuda --dtype bf16 --family llama --cuda-graphs "${L[@]}" >> $RES/train.jsonl 2> $RES/llama-graphs.err; echo "llama graphs rc $?"
grep "CUDA graph" $RES/llama-graphs.err | cut -c1-260
python3 - $RES/train.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    print(r.get('label'), round(r['tokens_per_s']), 'tok/s', round(r['ms_per_step'], 2), 'ms', round(r['peak_memory_gib'], 2), 'GiB', r.get('cuda_graphs'), r.get('graph_nodes'), r.get('graph_fallback', '')[:120])
PY
timeout 120 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-auto > $RES/toy-auto.log 2>&1; echo "toy auto rc $?"
grep -E "CUDA graph|validation loss|tokens/s" $RES/toy-auto.log | tail -4 | cut -c1-240
mkdir -p $RES/toy-auto-kept && cp $RES/toy-auto/metrics.jsonl $RES/toy-auto-kept/; rm -rf $RES/toy-auto
echo "all done at $(( $(date +%s) - t0 )) s"
