#!/usr/bin/env python3
"""PyTorch twin of retort's GPT for the training-throughput benchmark.

Same architecture (learned positions, pre-norm blocks, packed qkv, causal softmax attention, tanh GELU,
tied LM head), same batch, AdamW, float32 master weights with bf16 autocast when --dtype bf16.
Eager by default; --compile runs the model through torch.compile (default mode), compiled during the warm-up
steps, which are not timed. Prints one JSON line like bench_train_throughput, with the peak of
torch.cuda.max_memory_allocated over the whole run (parameters, optimizer state, activations) on a GPU.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attend(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attend(self.ln_1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, block, layers, heads, d, attention):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads, attention) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        # GPT-2's initialisation, as retort's (GptModel::initialize): N(0, 0.02) weights and embeddings, zero biases,
        # the residual projections scaled by 1 / sqrt(2 layers). PyTorch's defaults (N(0, 1) embeddings, tied to the
        # head) start the loss near 85 instead of ln(vocab); the time of a step does not depend on it either way.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "fc_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--label", default="custom")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embd", type=int, default=256)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--attention", default="math", choices=["math", "sdpa"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default mode)")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # retort's f32 GEMMs are full precision
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    model = Gpt(a.vocab, a.seq, a.layers, a.heads, a.embd, a.attention).to(dev)
    forward = torch.compile(model) if a.compile else model
    # The fused CUDA AdamW (one kernel for all parameters), as nanoGPT uses on a GPU.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if dev.type == "cuda" else {}))
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g).to(dev)
    x, y = data[:, :-1], data[:, 1:]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    seconds = 0.0
    for i in range(a.warmup + a.steps):
        sync()
        start = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = forward(x)
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.item()
        if i >= a.warmup:
            seconds += time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None
    framework = "torch-compile" if a.compile else f"torch-eager-{a.attention}"
    print(json.dumps({"framework": framework, "attention": a.attention, "label": a.label, "device": str(dev),
                      "dtype": a.dtype, "batch": a.batch, "seq": a.seq, "params": params,
                      "tokens_per_s": a.batch * a.seq * a.steps / seconds,
                      "ms_per_step": 1000 * seconds / a.steps, "final_loss": value, "peak_memory_gib": peak}))


if __name__ == "__main__":
    main()
