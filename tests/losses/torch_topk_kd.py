#!/usr/bin/python3
"""PyTorch oracle for tests/losses/test_topk_kd_torch.cpp: the top-k distillation losses written with torch ops
and differentiated by autograd.

Each IN file (safetensors, written by the C++ test) holds `student` F64 [N, V], `indices` I32 [N, k], `logprobs`
F64 [N, k] (the teacher's cached log-probs at S) and `labels` I32 [N], with `temperature`, `t_squared`
("0" | "1"), `kd_ratio`, `forward_weight`, `targets_at_temperature` ("0" | "1"), `ignore_index` and `reduction`
("mean" | "sum") in its metadata. A row is valid unless its label is ignore_index. The OUT file gets, for each
divergence below, `<name>_loss` F64 [1] and `<name>_grad` F64 [N, V] (d loss / d student):

  forward_kl_renormalized  KL(softmax_S(l / T) || softmax_S(x / T)) (l / T: l as cached at T = 1)
  forward_kl_rest          (k+1)-category KL(p || q): S plus the rest bucket, q = softmax(x / T) over V,
                           log p_rest = log(1 - exp(min(logsumexp_S l, -1e-7))), log q_rest = logsumexp over V \\ S
  reverse_kl               the same categories, KL(q || p)
  mixed                    forward_weight * forward_kl_rest + (1 - forward_weight) * reverse_kl

each per row, mixed as kd_ratio * T^2 (when t_squared) * divergence + (1 - kd_ratio) * F.cross_entropy(x, label)
(at temperature 1), then summed or averaged over the valid rows. Finite inputs only (the C++ float64 reference
covers -inf).

Usage: /usr/bin/python3 tests/losses/torch_topk_kd.py IN OUT [IN2 OUT2 ...]
"""
import sys

import torch
import torch.nn.functional as F

from oracle_io import read_safetensors, record_loss, run_pairs, write_safetensors


def per_row_divergences(x, idx, l, T, renormalized_scale, w):
    lq = F.log_softmax(x / T, dim=-1)
    lq_top = lq.gather(-1, idx)
    in_top = torch.zeros_like(lq, dtype=torch.bool).scatter_(-1, idx, True)
    lq_rest = torch.logsumexp(lq.masked_fill(in_top, float("-inf")), dim=-1)
    lp_rest = torch.log(-torch.expm1(torch.logsumexp(l, dim=-1).clamp(max=-1e-7)))
    p = l.exp()
    forward = (p * (l - lq_top)).sum(-1) + lp_rest.exp() * (lp_rest - lq_rest)
    reverse = (lq_top.exp() * (lq_top - l)).sum(-1) + lq_rest.exp() * (lq_rest - lp_rest)
    lp_hat = F.log_softmax(l * renormalized_scale, dim=-1)
    lq_hat = F.log_softmax((x / T).gather(-1, idx), dim=-1)
    renormalized = (lp_hat.exp() * (lp_hat - lq_hat)).sum(-1)
    return {
        "forward_kl_renormalized": renormalized,
        "forward_kl_rest": forward,
        "reverse_kl": reverse,
        "mixed": w * forward + (1 - w) * reverse,
    }


def run(in_path, out_path):
    tensors, meta = read_safetensors(in_path)
    T = float(meta["temperature"])
    scale = T * T if meta["t_squared"] == "1" else 1.0
    kd = float(meta["kd_ratio"])
    w = float(meta["forward_weight"])
    renormalized_scale = 1.0 if meta["targets_at_temperature"] == "1" else 1.0 / T
    ignore = int(meta["ignore_index"])
    idx = torch.tensor(tensors["indices"], dtype=torch.int64)
    l = torch.tensor(tensors["logprobs"], dtype=torch.float64)
    labels = torch.tensor(tensors["labels"], dtype=torch.int64)
    valid = labels != ignore
    count = valid.sum().clamp(min=1) if meta["reduction"] == "mean" else 1
    out = {}
    for name in ("forward_kl_renormalized", "forward_kl_rest", "reverse_kl", "mixed"):
        student = torch.tensor(tensors["student"], dtype=torch.float64, requires_grad=True)
        rows = kd * scale * per_row_divergences(student, idx, l, T, renormalized_scale, w)[name]
        if kd != 1:
            ce = F.cross_entropy(student, labels.clamp(min=0), reduction="none")
            rows = rows + (1 - kd) * ce
        loss = torch.where(valid, rows, torch.zeros((), dtype=rows.dtype)).sum() / count
        record_loss(out, name, loss, student)
    write_safetensors(out_path, out)


if __name__ == "__main__":
    run_pairs(run, sys.argv[1:], __doc__)
