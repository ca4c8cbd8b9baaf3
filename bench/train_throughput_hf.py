#!/usr/bin/env python3
"""transformers twin of retort's Llama-family training step for the training-throughput benchmark.

A LlamaForCausalLM from a LlamaConfig of the same shape (random init), float32 master weights with bf16 autocast
when --dtype bf16 (as retort: f32 parameters, bf16 compute), attention "eager" or "sdpa", the same next-token
cross-entropy and AdamW step on random tokens. Prints one JSON line like bench_train_throughput, with the peak
GPU memory of the whole run.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, LlamaConfig


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--label", default="custom")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16", choices=["f32", "bf16"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--embd", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--untied", action="store_true")
    p.add_argument("--family", default="llama", choices=["llama"])
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--attention", default="eager", choices=["eager", "sdpa"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model (skipped with a note if it fails)")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # retort's f32 GEMMs are full precision
    dev = torch.device(a.device)
    config = LlamaConfig(vocab_size=a.vocab, hidden_size=a.embd, intermediate_size=a.intermediate,
                         num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                         max_position_embeddings=a.seq, rms_norm_eps=1e-5, tie_word_embeddings=not a.untied,
                         rope_parameters={"rope_type": "default", "rope_theta": a.rope_theta})
    if dev.type == "cuda":  # the peak of the whole run, as bench_train_throughput's pool meter reports it
        torch.cuda.reset_peak_memory_stats(dev)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=a.attention).to(dev)
    forward = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g).to(dev)
    x, y = data[:, :-1], data[:, 1:]
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    seconds = 0.0
    value = float("nan")
    for i in range(a.warmup + a.steps):
        sync()
        start = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = forward(input_ids=x).logits
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.item()
        if i >= a.warmup:
            seconds += time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    name = f"transformers-{a.attention}" + ("-compiled" if a.compile else "")
    print(json.dumps({"framework": name, "label": a.label, "device": str(dev), "dtype": a.dtype, "batch": a.batch,
                      "seq": a.seq, "params": params, "tokens_per_s": a.batch * a.seq * a.steps / seconds,
                      "ms_per_step": 1000 * seconds / a.steps, "final_loss": value,
                      "peak_memory_gib": torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else None}))


if __name__ == "__main__":
    main()
