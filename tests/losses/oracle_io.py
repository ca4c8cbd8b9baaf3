"""What the PyTorch oracle scripts of tests/losses share: the part of the safetensors format the C++ tests
write and read (F64 and I32 tensors, string metadata), parsed here so no extra package is needed, and the
IN OUT [IN2 OUT2 ...] command line (several pairs per run, because importing torch costs more than the losses).
"""
import json
import struct

import numpy as np

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


def record_loss(out, name, loss, wrt):
    """Differentiates the scalar `loss`; stores it as out[name + "_loss"] F64 [1] and d loss / d wrt as
    out[name + "_grad"]."""
    loss.backward()
    out[name + "_loss"] = loss.detach().reshape(1).numpy()
    out[name + "_grad"] = wrt.grad.numpy()


def run_pairs(run, argv, usage):
    """Calls run(IN, OUT) for each pair of arguments; exits with the script's usage text on a bad list."""
    if len(argv) < 2 or len(argv) % 2:
        raise SystemExit(usage)
    for i in range(0, len(argv), 2):
        run(argv[i], argv[i + 1])
