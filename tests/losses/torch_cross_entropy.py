#!/usr/bin/python3
"""PyTorch oracle for tests/losses/test_ce_torch.cpp: torch.nn.functional.cross_entropy in float64.

Each IN file (safetensors, written by the C++ test) holds `logits` F64 [N, V] and `targets` I32 [N], with
`ignore_index`, `label_smoothing` and `reduction` ("mean" | "sum") in its metadata. The matching OUT file gets
`loss` F64 [1] and `grad` F64 [N, V] (d loss / d logits).

Usage: /usr/bin/python3 tests/losses/torch_cross_entropy.py IN OUT [IN2 OUT2 ...]
(several pairs per run, because importing torch costs more than the losses). Written for Debian's
python3-torch 1.13; the safetensors format is parsed here so no extra package is needed.
"""
import json
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

_NP_DTYPES = {"F64": np.float64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=np.dtype(_NP_DTYPES[info["dtype"]]).newbyteorder("<"))
        tensors[name] = array.reshape(info["shape"]).copy()
    return tensors, metadata


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype="<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for raw in chunks:
            f.write(raw)


def run(in_path, out_path):
    tensors, meta = read_safetensors(in_path)
    logits = torch.tensor(tensors["logits"], dtype=torch.float64, requires_grad=True)
    targets = torch.tensor(tensors["targets"], dtype=torch.int64)
    loss = F.cross_entropy(logits, targets, ignore_index=int(meta["ignore_index"]),
                           label_smoothing=float(meta["label_smoothing"]), reduction=meta["reduction"])
    loss.backward()
    write_safetensors(out_path, {"loss": loss.detach().reshape(1).numpy(), "grad": logits.grad.numpy()})


def main(argv):
    if len(argv) < 2 or len(argv) % 2:
        raise SystemExit(__doc__)
    for i in range(0, len(argv), 2):
        run(argv[i], argv[i + 1])


if __name__ == "__main__":
    main(sys.argv[1:])
