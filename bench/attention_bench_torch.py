#!/usr/bin/env python3
"""PyTorch twin of bench_attention: causal attention with grouped-query heads through
torch.nn.functional.scaled_dot_product_attention (its fused kernels: FlashAttention or memory-efficient, chosen by
PyTorch), with enable_gqa=True where this PyTorch has it (2.5 and later) and the key/value heads repeated with
repeat_interleave otherwise (the repeat is then part of the measured time, as it is of a model's step). q, k, v
arrive as [B, T, heads * D], like retort's op, and are viewed as [B, heads, T, D] (the transposes are included).
Before PyTorch 2.0 (no scaled_dot_product_attention; Debian's CPU build) the attention is written out as masked
softmax(Q K^T / sqrt(D)) V, named torch-math-repeat-kv. Measured like bench_attention: forward, and forward + backward, one warm-up, the median of the timed runs.
FLOP rates use bench_attention's causal convention: forward 4 B H T^2 D / 2, forward + backward 3.5 times that.
Prints a table and one JSON line per shape.
"""
import argparse
import inspect
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F


SDPA = getattr(F, "scaled_dot_product_attention", None)


def has_enable_gqa():
    if SDPA is None:
        return False
    try:
        return "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):  # a builtin without a signature: try the keyword
        try:
            z = torch.zeros(1, 2, 1, 8)
            F.scaled_dot_product_attention(z, z[:, :1], z[:, :1], is_causal=True, enable_gqa=True)
            return True
        except TypeError:
            return False


def attention(q, k, v, heads, kv_heads, gqa):
    b, t, _ = q.shape
    d = q.shape[-1] // heads
    q = q.view(b, t, heads, d).transpose(1, 2)
    k = k.view(b, t, kv_heads, d).transpose(1, 2)
    v = v.view(b, t, kv_heads, d).transpose(1, 2)
    if gqa:
        y = SDPA(q, k, v, is_causal=True, enable_gqa=True)
    else:
        group = heads // kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if SDPA is not None:
            y = SDPA(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(d)
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
            y = s.softmax(-1) @ v
    return y.transpose(1, 2).reshape(b, t, heads * d)


def median_seconds(device, repeats, fn):
    samples = []
    for run in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if run > 0:
            samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=["f32", "bf16"])
    parser.add_argument("--shapes", default="4x2048x32x8x64,4x2048x32x8x128", help="comma-separated BxTxHxKVxD")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--repeat-kv", action="store_true", help="repeat the key/value heads even with enable_gqa")
    parser.add_argument("--json", help="append one JSON object per shape to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    gqa = has_enable_gqa() and not args.repeat_kv
    framework = "torch-sdpa-gqa" if gqa else "torch-sdpa-repeat-kv" if SDPA is not None else "torch-math-repeat-kv"
    torch.manual_seed(0)
    print(f"{framework} {torch.__version__} on {device}, {args.dtype}")
    print(f"{'BxTxHxKVxD':>24} {'fwd ms':>10} {'fwd+bwd ms':>10} {'fwd TFLOP/s':>12} {'f+b TFLOP/s':>12}")
    for item in args.shapes.split(","):
        b, t, h, kv, d = (int(x) for x in item.split("x"))
        q = torch.randn(b, t, h * d, device=device, dtype=dtype)
        k = torch.randn(b, t, kv * d, device=device, dtype=dtype)
        v = torch.randn(b, t, kv * d, device=device, dtype=dtype)
        with torch.no_grad():
            fwd = median_seconds(device, args.repeats, lambda: attention(q, k, v, h, kv, gqa))
        for x in (q, k, v):
            x.requires_grad_(True)
        dout = torch.randn(b, t, h * d, device=device, dtype=dtype)

        def step():
            for x in (q, k, v):
                x.grad = None
            attention(q, k, v, h, kv, gqa).backward(dout)

        both = median_seconds(device, args.repeats, step)
        flops = 2.0 * b * h * t * t * d  # causal: half of 4 B H T^2 D
        print(f"{item:>24} {1e3 * fwd:>10.3f} {1e3 * both:>10.3f} {flops / fwd / 1e12:>12.1f} "
              f"{3.5 * flops / both / 1e12:>12.1f}")
        row = {"framework": framework, "device": str(device), "dtype": args.dtype, "shape": item, "batch": b, "T": t,
               "heads": h, "kv_heads": kv, "head_dim": d, "forward_ms": 1e3 * fwd, "forward_backward_ms": 1e3 * both,
               "forward_tflops": flops / fwd / 1e12, "forward_backward_tflops": 3.5 * flops / both / 1e12,
               "torch": torch.__version__}
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
