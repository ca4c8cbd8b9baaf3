#!/usr/bin/python3
"""PyTorch oracle for tests/losses/test_kd_torch.cpp: distribution losses between student and teacher logits.

Each IN file (safetensors, written by the C++ test) holds `student` and `teacher` F64 [N, V] and `labels`
I32 [N], with `temperature`, `t_squared` ("0" | "1"), `ignore_index`, `use_labels` ("0" | "1") and `reduction`
("mean" | "sum") in its metadata. A row is valid unless labels are used and its label is ignore_index. The OUT
file gets, for each reference below, `<name>_loss` F64 [1] and `<name>_grad` F64 [N, V] (d loss / d student):

  kl_div_forward  F.kl_div(log_softmax(x/T), log_softmax(t/T), log_target=True): KL(p || q) per row
  kl_div_reverse  F.kl_div(log_softmax(t/T), log_softmax(x/T), log_target=True): KL(q || p) per row
  kd_ops          sum p (log p - log q) written with torch ops, terms with p == 0 dropped (teacher -inf)
  reverse_ops     sum q (log q - log p) written with torch ops, terms with q == 0 dropped (student -inf)
  soft_ce_ops     -sum p log q written with torch ops, terms with p == 0 dropped

each summed per row, then summed or averaged over the valid rows, times T^2 when t_squared. (kl_div's
log_target form is exp(target) (target - input), which is NaN for a -inf target: the C++ test uses the kl_div
references on finite logits only.)

Usage: /usr/bin/python3 tests/losses/torch_kd.py IN OUT [IN2 OUT2 ...]
(several pairs per run, because importing torch costs more than the losses). Written for Debian's
python3-torch 1.13; the safetensors files are read and written by oracle_io.py (no extra package).
"""
import sys

import torch
import torch.nn.functional as F

from oracle_io import read_safetensors, record_loss, run_pairs, write_safetensors


def per_row_losses(x, t, T):
    log_q = F.log_softmax(x / T, dim=-1)
    log_p = F.log_softmax(t / T, dim=-1)
    p, q = log_p.exp(), log_q.exp()
    zero = torch.zeros((), dtype=x.dtype)
    return {
        "kl_div_forward": F.kl_div(log_q, log_p, log_target=True, reduction="none").sum(-1),
        "kl_div_reverse": F.kl_div(log_p, log_q, log_target=True, reduction="none").sum(-1),
        # The weight multiplies a log term already masked to 0 where the weight is 0: masking the product instead
        # would send 0 * NaN (from -inf - -inf) into the weight's gradient.
        "kd_ops": (p * torch.where(p > 0, log_p - log_q, zero)).sum(-1),
        "reverse_ops": (q * torch.where(q > 0, log_q - log_p, zero)).sum(-1),
        "soft_ce_ops": -(p * torch.where(p > 0, log_q, zero)).sum(-1),
    }


def run(in_path, out_path):
    tensors, meta = read_safetensors(in_path)
    T = float(meta["temperature"])
    scale = T * T if meta["t_squared"] == "1" else 1.0
    teacher = torch.tensor(tensors["teacher"], dtype=torch.float64)
    labels = torch.tensor(tensors["labels"], dtype=torch.int64)
    valid = labels != int(meta["ignore_index"]) if meta["use_labels"] == "1" else torch.ones_like(labels, dtype=bool)
    count = valid.sum().clamp(min=1) if meta["reduction"] == "mean" else 1
    out = {}
    for name in per_row_losses(teacher, teacher, T):
        student = torch.tensor(tensors["student"], dtype=torch.float64, requires_grad=True)
        rows = per_row_losses(student, teacher, T)[name]
        loss = torch.where(valid, rows, torch.zeros((), dtype=rows.dtype)).sum() / count * scale
        record_loss(out, name, loss, student)
    write_safetensors(out_path, out)


if __name__ == "__main__":
    run_pairs(run, sys.argv[1:], __doc__)
