#!/usr/bin/python3
"""PyTorch oracle for tests/losses/test_ce_torch.cpp: torch.nn.functional.cross_entropy in float64.

Each IN file (safetensors, written by the C++ test) holds `logits` F64 [N, V] and `targets` I32 [N], with
`ignore_index`, `label_smoothing` and `reduction` ("mean" | "sum") in its metadata. The matching OUT file gets
`loss` F64 [1] and `grad` F64 [N, V] (d loss / d logits).

Usage: /usr/bin/python3 tests/losses/torch_cross_entropy.py IN OUT [IN2 OUT2 ...]
(several pairs per run, because importing torch costs more than the losses). Written for Debian's
python3-torch 1.13; the safetensors files are read and written by oracle_io.py (no extra package).
"""
import sys

import torch
import torch.nn.functional as F

from oracle_io import read_safetensors, run_pairs, write_safetensors


def run(in_path, out_path):
    tensors, meta = read_safetensors(in_path)
    logits = torch.tensor(tensors["logits"], dtype=torch.float64, requires_grad=True)
    targets = torch.tensor(tensors["targets"], dtype=torch.int64)
    loss = F.cross_entropy(logits, targets, ignore_index=int(meta["ignore_index"]),
                           label_smoothing=float(meta["label_smoothing"]), reduction=meta["reduction"])
    loss.backward()
    write_safetensors(out_path, {"loss": loss.detach().reshape(1).numpy(), "grad": logits.grad.numpy()})


if __name__ == "__main__":
    run_pairs(run, sys.argv[1:], __doc__)
