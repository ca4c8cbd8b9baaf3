#!/usr/bin/env python3
"""The anchor TP-REKLS (Emerging-Optimizers' experimental TpRekls, as shared/reference/optimizer.md describes it),
written from that description in PyTorch, timed on the same parameters as bench/rekls_bench.cpp.

Per parameter and step, on every rank: all-gather the gradient (along its partition dim) and the L and R row
chunks; eigh of the old L, R to rebuild (Q, lam); the KL-Shampoo factor update on the full factors; write back
this rank's row chunk; eigh AGAIN on the new L, R; then steps 3-7 on full matrices, redundantly, and apply this
rank's chunk of the update. 3 all-gathers and 4 eigh per parameter per rank per step. M and V are full and
replicated. float32 throughout, TF32 off.

    python3 bench/rekls_anchor_torch.py --nproc 2 --device cuda --json out.jsonl

Weights and gradients come from the same 32-bit hash as bench/rekls_bench.cpp, so both start from the same
bits, and the JSON line has the same fields (bench/run_rekls_bench.sh compares them).
"""
import argparse
import json
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def hashed_values(count, seed, scale):
    salt = np.uint64((seed * 0x9E3779B9) & 0xFFFFFFFF)
    mask = np.uint64(0xFFFFFFFF)
    h = (np.arange(count, dtype=np.uint64) ^ salt) & mask
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & mask
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & mask
    h ^= h >> np.uint64(16)
    return ((h.astype(np.float64) / 4294967296.0 - 0.5) * 2.0 * scale).astype(np.float32)


def parse_params(text):
    out = []
    for item in text.split(","):
        shape, rest = item.split(":")
        rows, cols = (int(x) for x in shape.split("x"))
        pd, count = (int(x) for x in rest.split("*"))
        out += [(rows, cols, pd)] * count
    return out


def shard(full, pd, rank, tp):
    if pd < 0 or tp == 1:
        return full.clone()
    return full.chunk(tp, dim=pd)[rank].clone()  # a copy: a view would let updates write into `full`


def gather(local, dim, tp):
    if tp == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(tp)]
    dist.all_gather(parts, local.contiguous())
    return torch.cat(parts, dim=dim)


def descending_eigh(a):
    lam, q = torch.linalg.eigh(a)  # reads the lower triangle, ascending
    return lam.flip(0), q.flip(1)


class AnchorTpRekls:
    def __init__(self, params, lr_wd, args, rank, tp):
        self.params, self.wd, self.a, self.rank, self.tp, self.t = params, lr_wd, args, rank, tp, 0
        self.state = []
        self.eigh_calls = 0
        for p, pd in params:
            m, n = full_shape(p, pd, tp)
            dev = p.device
            self.state.append(dict(M=torch.zeros(m, n, device=dev), V=torch.zeros(m, n, device=dev),
                                   L=torch.zeros(m // tp, m, device=dev), R=torch.zeros(n // tp, n, device=dev)))

    def step(self, lr):
        a, tp, rank = self.a, self.tp, self.rank
        self.t += 1
        t = self.t
        bs = 0.95
        bhat = 1 - (1 - bs) / (1 - bs ** t)
        self.eigh_calls = 0
        for (p, pd), s in zip(self.params, self.state):
            G = gather(p.grad, pd, tp) if pd >= 0 else p.grad
            m, n = G.shape
            L, R = gather(s["L"], 0, tp), gather(s["R"], 0, tp)
            lamL, QL = descending_eigh(L)
            lamR, QR = descending_eigh(R)
            self.eigh_calls += 2
            CL = (QL / (m * lamL.clamp(min=a.eps))) @ QL.T
            CR = (QR / (n * lamR.clamp(min=a.eps))) @ QR.T
            L = bhat * L + (1 - bhat) * (G @ CR @ G.T)
            R = bhat * R + (1 - bhat) * (G.T @ CL @ G)
            s["L"] = L.chunk(tp, 0)[rank].contiguous()
            s["R"] = R.chunk(tp, 0)[rank].contiguous()
            original = QL @ s["M"] @ QR.T
            lamL, QL = descending_eigh(L)
            lamR, QR = descending_eigh(R)
            self.eigh_calls += 2
            s["M"] = QL.T @ original @ QR
            p.data.mul_(1 - lr * self.wd)
            Gr = QL.T @ G @ QR
            s["M"].mul_(0.9).add_(Gr, alpha=0.1)
            s["V"].mul_(0.95).addcmul_(Gr, Gr, value=0.05)
            U = (s["M"] / (1 - 0.9 ** t)) / ((s["V"] / (1 - 0.95 ** t)).sqrt() + a.eps)
            U = QL @ U @ QR.T
            p.data.add_(shard(U, pd, rank, tp), alpha=-lr)

    def state_bytes(self):
        return sum(x.numel() * x.element_size() for s in self.state for x in s.values())


def full_shape(p, pd, tp):
    m, n = p.shape
    if pd == 0:
        m *= tp
    elif pd == 1:
        n *= tp
    return m, n


def make_params(specs, rank, tp, device):
    params, initial = [], []
    for i, (rows, cols, pd) in enumerate(specs):
        full = torch.from_numpy(hashed_values(rows * cols, 1000 + i, 0.02)).view(rows, cols)
        initial.append(full)
        params.append((shard(full, pd, rank, tp).to(device).requires_grad_(True), pd))
    return params, initial


def set_gradients(params, specs, step, scale, rank, tp, device):
    for i, ((p, pd), (rows, cols, _)) in enumerate(zip(params, specs)):
        full = torch.from_numpy(hashed_values(rows * cols, 2000 + 100 * i + step, scale)).view(rows, cols)
        p.grad = shard(full, pd, rank, tp).to(device)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(rank, tp, init_method, args):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        device_name = torch.cuda.get_device_name(rank)
    else:
        device, device_name = torch.device("cpu"), "cpu"
    if tp > 1:
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo", init_method=init_method, rank=rank,
                                world_size=tp)
    params_text = args.params or ("4096x1024:0*4,1024x4096:1*4" if args.device == "cuda" else "256x64:0*4,64x256:1*4")
    specs = parse_params(params_text)

    params, _ = make_params(specs, rank, tp, device)
    opt = AnchorTpRekls(params, 0.01, args, rank, tp)
    set_gradients(params, specs, 1, args.grad_scale, rank, tp, device)
    seconds = []
    with torch.no_grad():
        for s in range(args.warmup + args.steps):
            sync(device)
            if tp > 1:
                dist.barrier()
            start = time.perf_counter()
            opt.step(args.lr)
            sync(device)
            elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
            if tp > 1:
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            if s >= args.warmup:
                seconds.append(elapsed.item())
    eigh_per_step = opt.eigh_calls * tp  # every rank decomposes every factor twice
    state_bytes = opt.state_bytes()

    params, initial = make_params(specs, rank, tp, device)
    check_opt = AnchorTpRekls(params, 0.01, args, rank, tp)
    with torch.no_grad():
        for step in range(1, args.check_steps + 1):
            set_gradients(params, specs, step, args.grad_scale, rank, tp, device)
            check_opt.step(args.lr)
    check = {}
    for i, ((p, pd), start) in enumerate(zip(params, initial)):
        full = (gather(p.detach(), pd, tp) if pd >= 0 else p.detach()).cpu().double()
        delta = (full - start.double()).flatten()
        stride = max(1, delta.numel() // args.check_samples)
        check[f"p{i}"] = {"max_abs_update": delta.abs().max().item(), "stride": stride,
                          "samples": delta[::stride].tolist()}
    if rank == 0:
        mean = sum(seconds) / len(seconds)
        print(f"anchor TP-REKLS (PyTorch {torch.__version__}) on {tp} x {device_name}, params {params_text}: step "
              f"{1e3 * mean:.3f} ms (mean of {args.steps}; best {1e3 * min(seconds):.3f} ms), {eigh_per_step} eigh "
              f"per step over the group, optimizer state {state_bytes / 2**20:.1f} MiB per rank")
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"impl": "anchor", "device": device_name, "tp": tp, "params": params_text,
                                    "step_ms": 1e3 * mean, "best_step_ms": 1e3 * min(seconds), "steps": args.steps,
                                    "eigh_per_step": eigh_per_step, "state_bytes_per_rank": state_bytes,
                                    "check_steps": args.check_steps, "check": check,
                                    "torch_version": torch.__version__}) + "\n")
    if tp > 1:
        dist.barrier()
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=1, help="ranks (the tp size), one process each")
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--params", default="", help="ROWSxCOLS:PD*COUNT items, as bench_rekls")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--check-steps", type=int, default=2)
    p.add_argument("--check-samples", type=int, default=2048)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--eps", type=float, default=1e-3)
    p.add_argument("--grad-scale", type=float, default=1e-3)
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.nproc == 1:
        run(0, 1, "", args)
    else:
        mp.spawn(run, args=(args.nproc, f"tcp://127.0.0.1:{free_port()}", args), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
