#!/usr/bin/env python3
"""The peer of `retort bench loss` on one GPU: the same losses written with PyTorch ops, in eager mode and under
torch.compile, forward + backward over bf16 logits [tokens, vocab], with the same JSON fields (framework "torch",
variant "eager" | "compile").

  ce   F.cross_entropy(logits.float(), targets)                        (mean over the tokens)
  fkl  F.kl_div(log_softmax(s.float()), log_softmax(t.float()), log_target=True, reduction="batchmean")
  rkl  the same with student and teacher swapped in kl_div: KL(q || p)

The logits are upcast to float32 as a training script does (the losses are computed in float32 by retort too);
the gradient lands in logits.grad (bf16). Time: median of --iters steps after --warmup, each between CUDA events.
Bandwidth: the same byte count as retort (logits read twice + gradient written once, + teacher read twice for
KL) over the time, as a share of a device-to-device copy measured here. Memory: the allocator's peak during one
step above what was allocated before it (gradient included). An out-of-memory step is reported, not a crash.

  python3 bench/loss_bench_torch.py --json torch.jsonl [--losses ce,fkl,rkl] [--vocab 32768,65536,131072]
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F


def cross_entropy(student, teacher, targets):
    return F.cross_entropy(student.float(), targets)


def forward_kl(student, teacher, targets):
    q_log = F.log_softmax(student.float(), dim=-1)
    p_log = F.log_softmax(teacher.float(), dim=-1)
    return F.kl_div(q_log, p_log, log_target=True, reduction="batchmean")


def reverse_kl(student, teacher, targets):
    q_log = F.log_softmax(student.float(), dim=-1)
    p_log = F.log_softmax(teacher.float(), dim=-1)
    return F.kl_div(p_log, q_log, log_target=True, reduction="batchmean")


LOSSES = {"ce": cross_entropy, "fkl": forward_kl, "rkl": reverse_kl}


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return times


def copy_bandwidth(device, mib=1024):
    src = torch.zeros(mib << 18, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    times = timed(lambda: dst.copy_(src), 20, 5)
    seconds = statistics.median(times) / 1e3
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (mib << 20) / seconds / 1e9


def measure(name, variant, loss_fn, args, device, copy_gbps):
    tokens, vocab = args.tokens, args.vocab_now
    kl = name != "ce"
    logits_bytes = tokens * vocab * 2
    row = {"framework": "torch", "variant": variant, "loss": name, "tokens": tokens, "vocab": vocab, "tp": 1,
           "dtype": "bf16", "device": torch.cuda.get_device_name(device), "status": "ok", "error": "",
           "bytes": logits_bytes * (5 if kl else 3), "logits_bytes": logits_bytes,
           "copy_bandwidth_gbps": copy_gbps, "iters": args.iters, "warmup": args.warmup,
           "torch_version": torch.__version__}
    student = teacher = targets = None
    try:
        gen = torch.Generator(device=device).manual_seed(args.seed)
        student = (torch.randn(tokens, vocab, device=device, generator=gen) * args.logit_std).to(torch.bfloat16)
        student.requires_grad_(True)
        if kl:
            teacher = (torch.randn(tokens, vocab, device=device, generator=gen) * args.logit_std).to(torch.bfloat16)
        else:
            targets = torch.randint(0, vocab, (tokens,), device=device, generator=gen)

        def step():
            student.grad = None
            loss = loss_fn(student, teacher, targets)
            loss.backward()
            return loss

        times = timed(step, args.iters, args.warmup)
        student.grad = None
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        loss = step()
        torch.cuda.synchronize(device)
        extra = torch.cuda.max_memory_allocated(device) - base
        median = statistics.median(times)
        gbps = row["bytes"] / (median / 1e3) / 1e9
        row.update({"time_ms": median, "time_ms_min": min(times), "time_ms_mean": statistics.mean(times),
                    "bandwidth_gbps": gbps, "bandwidth_share": gbps / copy_gbps, "peak_extra_bytes": extra,
                    "extra_per_logits": extra / logits_bytes, "loss_value": loss.item(),
                    "grad_norm": student.grad.float().norm().item()})
    except torch.cuda.OutOfMemoryError as e:
        row.update({"status": "oom", "error": str(e).splitlines()[0], "time_ms": None})
    finally:
        del student, teacher, targets
        torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--losses", default="ce,fkl,rkl")
    ap.add_argument("--vocab", default="32768,65536,131072")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--variants", default="eager,compile")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--logit-std", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("loss_bench_torch.py needs a GPU (torch.cuda.is_available() is False)")
    device = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = False
    copy_gbps = copy_bandwidth(device)
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(device)}: copy bandwidth {copy_gbps:.0f} GB/s")
    print(f"# {'loss':<4} {'vocab':>7} {'variant':<8} {'time(ms)':>9} {'min(ms)':>9} {'GB/s':>7} {'share':>6} "
          f"{'extra(MiB)':>10} {'x logits':>8} {'loss value':>12}")
    out = open(args.json, "w") if args.json else None
    for name in args.losses.split(","):
        for vocab in (int(v) for v in args.vocab.split(",")):
            args.vocab_now = vocab
            for variant in args.variants.split(","):
                fn = LOSSES[name]
                if variant == "compile":
                    torch._dynamo.reset()
                    fn = torch.compile(fn)
                row = measure(name, variant, fn, args, device, copy_gbps)
                if row["status"] == "ok":
                    print(f"  {name:<4} {vocab:>7} {variant:<8} {row['time_ms']:>9.3f} {row['time_ms_min']:>9.3f} "
                          f"{row['bandwidth_gbps']:>7.0f} {row['bandwidth_share']:>6.2f} "
                          f"{row['peak_extra_bytes'] / 2**20:>10.1f} {row['extra_per_logits']:>8.3f} "
                          f"{row['loss_value']:>12.6f}", flush=True)
                else:
                    print(f"  {name:<4} {vocab:>7} {variant:<8} {'OOM':>9}   {row['error']}", flush=True)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
