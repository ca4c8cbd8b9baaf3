#!/usr/bin/env python3
"""PyTorch twin of bench_generate: the same GPT (learned positions, pre-norm blocks, packed qkv, causal softmax
attention, tanh GELU, tied LM head), randomly initialised, generating with a KV cache written here in plain torch
ops: one prefill forward over the prompts, then one forward per new token that reads the cached keys and values.
Measured like bench_generate (one warm-up run, the median of the timed runs): prefill time and decode tokens/s
(tokens after the first, over all sequences). Prints a table and one JSON line per batch size.

--compile wraps the decode step (the forward and the next-token choice) in torch.compile (PyTorch 2) with a static
KV cache, as in PyTorch's own fast-generation recipes: the caches are buffers of the model with a fixed capacity,
the position is a device tensor and a mask hides the slots not written yet, so every step has the same shapes and
addresses; --compile-mode reduce-overhead then replays each step as a CUDA graph.
"""
import argparse
import contextlib
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attend(self, x, cache_k, cache_v, start, mask):
        """x [B, T, C] at positions start..start+T-1; writes their keys and values into the cache [B, H, cap, hd]
        and attends over positions 0..start+T-1. With a mask ([T, cap] additive; the fixed-shape path of
        --compile), start is a tensor of the T positions and the whole cache is read."""
        b, t, c = x.shape
        hd = c // self.heads
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        if mask is None:
            cache_k[:, :, start:start + t] = k
            cache_v[:, :, start:start + t] = v
            keys, values = cache_k[:, :, :start + t], cache_v[:, :, :start + t]
            s = (q @ keys.transpose(-2, -1)) / math.sqrt(hd)
            if t > 1:
                causal = torch.ones(t, start + t, dtype=torch.bool, device=x.device).triu(start + 1)
                s = s.masked_fill(causal, float("-inf"))
        else:
            cache_k.index_copy_(2, start, k.to(cache_k.dtype))
            cache_v.index_copy_(2, start, v.to(cache_v.dtype))
            keys, values = cache_k, cache_v
            s = (q @ keys.transpose(-2, -1)) / math.sqrt(hd) + mask
        y = s.softmax(-1) @ values
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x, cache_k, cache_v, start, mask=None):
        x = x + self.attend(self.ln_1(x), cache_k, cache_v, start, mask)
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, block, layers, heads, d):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
        self.static_caches = 0

    def setup_static_caches(self, batch, capacity, dtype):
        """The static KV cache of --compile: one key and one value buffer per layer, [B, H, capacity, hd]."""
        heads, d = self.blocks[0].heads, self.wte.weight.size(1)
        # Fixed addresses, so that the CUDA graphs of reduce-overhead may write the caches in place.
        mark_static = getattr(getattr(torch, "_dynamo", None), "mark_static_address", None)
        for i in range(len(self.blocks)):
            for kind in ("k", "v"):
                cache = torch.zeros(batch, heads, capacity, d // heads, dtype=dtype, device=self.wte.weight.device)
                if mark_static is not None:
                    mark_static(cache)
                self.register_buffer(f"cache_{kind}{i}", cache, persistent=False)
        self.static_caches = len(self.blocks)

    def caches(self):
        return [(getattr(self, f"cache_k{i}"), getattr(self, f"cache_v{i}")) for i in range(self.static_caches)]

    def forward(self, idx, caches, start, mask=None):
        """Logits of the last position of idx [B, T] placed at positions start.., extending the caches (None: the
        static caches)."""
        if caches is None:
            caches = self.caches()
        pos = start if torch.is_tensor(start) else torch.arange(start, start + idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block, (k, v) in zip(self.blocks, caches):
            x = block(x, k, v, start, mask)
        return self.ln_f(x[:, -1]) @ self.wte.weight.t()


def next_tokens(logits, temperature):
    if temperature == 0:
        return logits.argmax(-1)
    return torch.multinomial((logits.float() / temperature).softmax(-1), 1).squeeze(-1)


def generate(model, prompts, new_tokens, dtype, temperature, decode_step, static):
    """Returns (prefill seconds, decode seconds): the prefill includes its first token, like bench_generate.
    static: the caches are the model's static buffers (--compile), already sized for this batch."""
    b, p = prompts.shape
    layers, heads = len(model.blocks), model.blocks[0].heads
    d = model.wte.weight.size(1)
    capacity = p + new_tokens
    caches = None if static else [
        (torch.empty(b, heads, capacity, d // heads, dtype=dtype, device=prompts.device),
         torch.empty(b, heads, capacity, d // heads, dtype=dtype, device=prompts.device)) for _ in range(layers)]
    sync = torch.cuda.synchronize if prompts.is_cuda else (lambda: None)
    autocast = (contextlib.nullcontext() if dtype == torch.float32 else
                torch.autocast(prompts.device.type, dtype=dtype))
    with torch.no_grad(), autocast:
        sync()
        start = time.perf_counter()
        token = next_tokens(model(prompts, caches, 0), temperature)
        token.cpu()
        prefilled = time.perf_counter()
        for step in range(1, new_tokens):
            token = decode_step(token[:, None], caches, p + step - 1, capacity)
            token.cpu()  # the token goes to the host every step, as a generation loop needs it there
        sync()
        done = time.perf_counter()
    return prefilled - start, done - prefilled


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="gpt2-small")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=["f32", "bf16"])
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--embd", type=int, default=768)
    parser.add_argument("--compile", action="store_true", help="torch.compile the decode step (PyTorch 2)")
    parser.add_argument("--compile-mode", default="default", help="torch.compile mode, e.g. reduce-overhead")
    parser.add_argument("--json", help="append one JSON object per batch size to this file")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = Gpt(args.vocab, args.context, args.layers, args.heads, args.embd).to(device).eval()

    def eager_step(token, caches, position, capacity):
        return next_tokens(model(token, caches, position), args.temperature)

    decode_step = eager_step
    framework = "torch-eager"
    if args.compile:
        # The weights in the compute dtype once (autocast would cast every weight at every step inside the graph).
        model = model.to(dtype)

        def one_token(token, position):
            """token [B, 1], position [1] on the device -> the next tokens [B], with fixed shapes: attend over the
            whole static cache, masking the slots not written yet."""
            capacity = model.cache_k0.size(2)
            seen = torch.arange(capacity, device=token.device) <= position
            mask = torch.where(seen, 0.0, float("-inf")).to(model.wte.weight.dtype)[None, :]
            logits = model(token, None, position, mask)
            if args.temperature == 0:
                return logits.argmax(-1)
            # Sampling by the exponential race (argmax p / E, E ~ Exp(1)), which compiles into the graph.
            probs = (logits.float() / args.temperature).softmax(-1)
            return (probs / torch.empty_like(probs).exponential_(1)).argmax(-1)

        compiled = torch.compile(one_token, mode=args.compile_mode, dynamic=False)
        mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

        def compiled_step(token, caches, position, capacity):
            if mark_step is not None:
                mark_step()
            # The outputs of a replayed graph are overwritten by the next replay: keep a copy.
            return compiled(token, torch.tensor([position], device=token.device)).clone()

        decode_step = compiled_step
        framework = "torch-compile" if args.compile_mode == "default" else f"torch-compile-{args.compile_mode}"

    print(f"{framework} {args.label} on {device}, {args.dtype}: {args.layers} layers, {args.heads} heads, width "
          f"{args.embd}, vocab {args.vocab}; prompt {args.prompt}, {args.new} new tokens")
    print(f"{'batch':>6} {'prefill ms':>12} {'decode tokens/s':>16} {'ms per step':>14}")
    gen = torch.Generator().manual_seed(0)
    for batch in (int(b) for b in args.batches.split(",")):
        prompts = torch.randint(0, args.vocab, (batch, args.prompt), generator=gen).to(device)
        if args.compile:
            model.setup_static_caches(batch, args.prompt + args.new, dtype)
        prefill, decode = [], []
        for run in range(args.repeats + 1):
            p, d = generate(model, prompts, args.new, dtype, args.temperature, decode_step, args.compile)
            if run > 0:
                prefill.append(p)
                decode.append(d)
        prefill_ms, decode_s = 1e3 * statistics.median(prefill), statistics.median(decode)
        row = {"framework": framework, "label": args.label, "device": str(device), "dtype": args.dtype,
               "batch": batch, "prompt": args.prompt, "new_tokens": args.new, "prefill_ms": prefill_ms,
               "decode_tokens_per_s": batch * (args.new - 1) / decode_s,
               "ms_per_step": 1e3 * decode_s / (args.new - 1)}
        print(f"{batch:>6} {prefill_ms:>12.2f} {row['decode_tokens_per_s']:>16.1f} {row['ms_per_step']:>14.3f}")
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
