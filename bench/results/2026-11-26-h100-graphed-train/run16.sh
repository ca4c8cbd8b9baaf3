#!/usr/bin/env bash
# Call K (merged tree: graphed training steps with stale gradients, fused decode kernels): every GPU test suite, GPT-2
# small at batch 16 and 8 eager / graphed / torch.compile, and the toy trainer with train.cuda_graphs auto and off.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -e /work/main ]] || { mkdir -p /work && ln -s "$PWD" /work/main; }
t0=$(date +%s)
RES=/tmp/r16; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r16' EXIT
tar xJf gpu/m.tar.xz -C gpu; b=$PWD/gpu/m; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
F='*Cuda*:*Nccl*:*Gpu*:FusedKernelsModel.*:InferenceCopy.*:DecodeStep.*:SampledKdLoss.*:WorkingCopy.*:WorkingCopies.*:TpWorkingCopies.*:OpProfiler.*:TeacherSample.*:SampledKdUnbiased.*:SampledCache.*:*Sampled*:AdamW*:GradNorm*:Graphed*:StaleGradients.*:ArenaOffsets.*:CaptureArena*:SmallMLinear.*:EmbeddingSum.*:DecodeFused.*'
for t in core parallel losses optim distill; do
  ( timeout 280 $b/tests/retort_${t}_tests --gtest_filter="$F" > $RES/tests-$t.log 2>&1; echo "$t rc $?" > $RES/rc-$t ) &
done
wait
for t in core parallel losses optim distill; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/tests-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-$t.log) skipped"
  grep -E '^\[  FAILED  \]|fell back' $RES/tests-$t.log | sort -u | head -20
done
echo "tests done at $(( $(date +%s) - t0 )) s"
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10)
for bs in 16 8; do
  timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-eager --batch $bs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-eager-$bs.err; echo "eager b$bs rc $?"
  RETORT_LOG_LEVEL=info timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-graphs --batch $bs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs-$bs.err; echo "graphs b$bs rc $?"
  grep "CUDA graph" $RES/train-graphs-$bs.err | cut -c1-230
done
timeout 60 $b/bench/bench_train_throughput --label gpt2-b16-graphs-clip --batch 16 --cuda-graphs --grad-clip 1.0 "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs-clip.err; echo "graphs clip rc $?"
timeout 60 $b/bench/bench_train_throughput --label gpt2-b16-eager-clip --batch 16 --grad-clip 1.0 "${g[@]}" >> $RES/train.jsonl 2> $RES/train-eager-clip.err; echo "eager clip rc $?"
for bs in 16 8; do
  timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b$bs-compile --batch $bs --attention sdpa --compile "${g[@]}" >> $RES/train.jsonl 2> $RES/torch-$bs.err; echo "compile b$bs rc $?"
done
python3 - $RES/train.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    print(r.get('label'), r.get('framework'), round(r['tokens_per_s']), 'tok/s', round(r['ms_per_step'], 2), 'ms', round(r['peak_memory_gib'], 2), 'GiB', r.get('cuda_graphs', ''), r.get('graph_nodes', ''))
PY
echo "bench done at $(( $(date +%s) - t0 )) s"
for mode in auto off; do
  timeout 150 $b/retort train --device cuda model.dtype=bf16 train.cuda_graphs=$mode run.dir=$RES/toy-$mode > $RES/toy-$mode.log 2>&1; echo "toy $mode rc $?"
  grep -E "CUDA graph|validation loss|tokens/s" $RES/toy-$mode.log | tail -4 | cut -c1-220
  mkdir -p $RES/toy-$mode-kept && cp $RES/toy-$mode/metrics.jsonl $RES/toy-$mode/*.json $RES/toy-$mode-kept/ 2>/dev/null; rm -rf $RES/toy-$mode
done
echo "all done at $(( $(date +%s) - t0 )) s"
