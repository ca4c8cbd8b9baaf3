#!/usr/bin/python3
"""PyTorch twin of retort's GptModel: the external oracle of tests/parallel/test_gpt_torch_twin.cpp.

Reads a safetensors file written by the C++ test (the model's weights, `input_ids` and `targets` as i32,
the config and the AdamW settings in `__metadata__`), rebuilds the same GPT from plain torch ops in
float64, and writes a safetensors file of f64 references:
  logits [B, T, V], loss [1], grad.<param> for every parameter,
  adamw_losses [steps + 1] (loss before each step, then after the last), final.<param> (weights after the
  last step).

Usage: /usr/bin/python3 scripts/torch_twin.py IN.safetensors OUT.safetensors [IN2 OUT2 ...]
(several pairs in one run, because importing torch costs more than the twins themselves).

Written for Debian's python3-torch 1.13 (no F.scaled_dot_product_attention, no nn.RMSNorm) and numpy;
the safetensors format is parsed here so that no extra package is needed.
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

_NP_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in _NP_DTYPES:
            raise SystemExit(f"{path}: tensor {name} has dtype {info['dtype']}, which this script does not read")
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=np.dtype(_NP_DTYPES[info["dtype"]]).newbyteorder("<"))
        tensors[name] = array.reshape(info["shape"]).copy()
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array, dtype="<f8")
        raw = array.tobytes()
        header[name] = {"dtype": "F64", "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)  # keeps the data buffer 8-byte aligned, as the format recommends
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for raw in chunks:
            f.write(raw)


class Config:
    def __init__(self, meta):
        self.vocab_size = int(meta["vocab_size"])
        self.block_size = int(meta["block_size"])
        self.n_layer = int(meta["n_layer"])
        self.n_head = int(meta["n_head"])
        self.n_embd = int(meta["n_embd"])
        self.mlp_ratio = int(meta["mlp_ratio"])
        self.bias = meta["bias"] == "true"
        self.tie_weights = meta["tie_weights"] == "true"
        self.norm = meta["norm"]
        self.norm_eps = float(meta["norm_eps"])
        if self.norm not in ("layernorm", "rmsnorm"):
            raise SystemExit(f"unknown norm '{self.norm}'")


def norm(cfg, p, prefix, x):
    weight = p[prefix + ".weight"]
    if cfg.norm == "rmsnorm":
        # torch 1.13 has no RMSNorm: x / sqrt(mean(x^2) + eps) * w, without a bias or a mean shift.
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + cfg.norm_eps) * weight
    return F.layer_norm(x, (cfg.n_embd,), weight, p.get(prefix + ".bias"), cfg.norm_eps)


def linear(p, prefix, x):
    return F.linear(x, p[prefix + ".weight"], p.get(prefix + ".bias"))


def attention(cfg, qkv):
    B, T, C3 = qkv.shape
    C = C3 // 3
    H, D = cfg.n_head, C // cfg.n_head
    # q, k and v are consecutive C-wide chunks; head h owns columns [h D, (h + 1) D) of each chunk.
    q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in qkv.split(C, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return (probs @ v).transpose(1, 2).reshape(B, T, C)


def forward(cfg, p, ids):
    B, T = ids.shape
    x = p["wte.weight"][ids] + p["wpe.weight"][torch.arange(T)].unsqueeze(0)
    for i in range(cfg.n_layer):
        b = f"blocks.{i}."
        x = x + linear(p, b + "attn.proj", attention(cfg, linear(p, b + "attn.qkv", norm(cfg, p, b + "ln_1", x))))
        h = F.gelu(linear(p, b + "mlp.fc", norm(cfg, p, b + "ln_2", x)), approximate="tanh")
        x = x + linear(p, b + "mlp.proj", h)
    x = norm(cfg, p, "ln_f", x)
    head = p["wte.weight"] if cfg.tie_weights else p["lm_head.weight"]
    return x @ head.t()


def loss_of(cfg, p, ids, targets):
    logits = forward(cfg, p, ids)
    return logits, F.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1), ignore_index=-100)


def adamw_steps(cfg, meta, params, ids, targets):
    """One AdamW step per learning rate in adamw_lrs, each on a fresh forward/backward, optionally after
    clipping the global gradient norm; the losses before each step and after the last, and the final weights."""
    names = list(params)
    lrs = [float(v) for v in meta["adamw_lrs"].split(",")]
    # The groups of retort's optim::decay_groups: matrices decay, vectors (biases, norm weights) do not.
    decay = [params[n] for n in names if params[n].dim() >= 2]
    no_decay = [params[n] for n in names if params[n].dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": float(meta["adamw_weight_decay"])},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=lrs[0], betas=(float(meta["adamw_beta1"]), float(meta["adamw_beta2"])), eps=float(meta["adamw_eps"]))
    clip = float(meta.get("clip_norm", "0"))
    losses = []
    for lr in lrs:
        opt.zero_grad()
        _, loss = loss_of(cfg, params, ids, targets)
        loss.backward()
        losses.append(loss.item())
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    with torch.no_grad():
        losses.append(loss_of(cfg, params, ids, targets)[1].item())
    out = {"adamw_losses": np.array(losses)}
    for n in names:
        out["final." + n] = params[n].detach().numpy().copy()
    return out


def twin(in_path, out_path):
    tensors, meta = read_safetensors(in_path)
    cfg = Config(meta)
    ids = torch.from_numpy(tensors.pop("input_ids").astype(np.int64))
    targets = torch.from_numpy(tensors.pop("targets").astype(np.int64))
    # Every remaining tensor is a parameter, in the C++ registration order.
    names = list(tensors)
    params = {n: torch.from_numpy(tensors[n].astype(np.float64)).requires_grad_(True) for n in names}

    out = {}
    logits, loss = loss_of(cfg, params, ids, targets)
    loss.backward()
    out["logits"] = logits.detach().numpy()
    out["loss"] = np.array([loss.item()])
    for n in names:
        out["grad." + n] = params[n].grad.numpy().copy()

    if "adamw_lrs" in meta:
        out.update(adamw_steps(cfg, meta, params, ids, targets))
    write_safetensors(out_path, out, {"torch_version": torch.__version__})


def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        raise SystemExit("usage: torch_twin.py IN.safetensors OUT.safetensors [IN2 OUT2 ...]")
    for in_path, out_path in zip(args[::2], args[1::2]):
        twin(in_path, out_path)


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
