#!/usr/bin/env python3
"""All-reduce and all-gather bus bandwidth through torch.distributed, the twin of bench_comm_bandwidth.

Same sizes, definitions and JSON lines as bench/comm_bandwidth.cpp (nccl-tests' definitions):
  algBw = bytes / time (GB/s = 1e9 bytes/s)
  busBw = algBw * 2(n-1)/n for all-reduce, algBw * (n-1)/n for all-gather
where bytes is the all-reduce buffer, and for all-gather the gathered output (each rank sends bytes/n). At each
size: a correctness check, --warmup untimed ops, a barrier, then --iters back-to-back ops timed with CUDA events
on the current stream (the host clock for gloo); the mean time per op is averaged over the ranks.

Runs under torchrun (`torchrun --nproc_per_node N comm_bandwidth_torch.py ...`) or on its own, starting N
processes with torch.multiprocessing.spawn and a tcp://127.0.0.1 rendezvous:
  python3 bench/comm_bandwidth_torch.py --nproc 2 [--backend nccl|gloo] [--max-bytes 1G] [--json out.jsonl]
"""
import argparse
import json
import os
import re
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def parse_size(text):
    """'4096', '1K', '64M', '1G', '1KiB', '2MB': binary multiples, as the C++ benchmark."""
    m = re.fullmatch(r"(\d{1,15})([KMG]?)(I?B)?", text.strip().upper())
    if not m:
        raise SystemExit(f"'{text}' is not a size (examples: 4096, 1K, 64M, 1G)")
    value = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
    if value <= 0 or value > 1 << 40:
        raise SystemExit(f"size '{text}' is out of range (1 to 1T)")
    return value


def size_label(n):
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def nccl_version_text():
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # no CUDA build of torch
        return ""
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v[:3])
    major, minor = (v // 10000, v // 100 % 100) if v >= 10000 else (v // 1000, v // 100 % 10)  # NCCL_VERSION_CODE
    return f"{major}.{minor}.{v % 100}"


class OpTimer:
    def __init__(self, device, world, local_rank):
        self.device, self.world, self.local_rank = device, world, local_rank

    def barrier(self):
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.local_rank])
            torch.cuda.synchronize(self.device)  # the GPU has passed the barrier and the warm-up
        else:
            dist.barrier()

    def mean_seconds(self, op, warmup, iters):
        for _ in range(warmup):
            op()
        self.barrier()
        if self.device.type == "cuda":
            # ProcessGroupNCCL runs on its own stream, which waits for the current stream; a synchronous op makes
            # the current stream wait for it. Events on the current stream bracket all of them.
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                op()
            stop.record()
            stop.synchronize()
            seconds = start.elapsed_time(stop) / 1000.0
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                op()
            seconds = time.perf_counter() - t0
        total = torch.tensor([seconds / iters], dtype=torch.float64, device=self.device)
        dist.all_reduce(total)
        return total.item() / self.world


def expect(t, index, want, what):
    got = t[index].item()
    if got != want:
        raise RuntimeError(f"{what}: element {index} is {got}, expected {want}")


def run(rank, world, local_rank, init_method, args):
    nccl = args.backend == "nccl"
    if nccl:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, init_method=init_method, rank=rank, world_size=world)
    n = dist.get_world_size()
    dtype = DTYPES[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    min_bytes = parse_size(args.min_bytes)
    max_bytes = parse_size(args.max_bytes or ("1G" if nccl else "16M"))
    device_name = torch.cuda.get_device_name(local_rank) if nccl else "cpu"
    nccl_version = nccl_version_text() if nccl else ""
    # Gloo has no all_gather_into_tensor in every torch version: gather into views of one output there.
    gather_into_tensor = nccl and hasattr(dist, "all_gather_into_tensor")

    out = open(args.json, "w") if rank == 0 and args.json else None
    if rank == 0:
        print(f"# torch {torch.__version__} {args.backend} bandwidth: {n} ranks, {args.dtype}, {args.iters} timed "
              f"iterations after {args.warmup} warm-up, {device_name}"
              + (f", NCCL {nccl_version}" if nccl_version else ""))
        print(f"# all-gather size = the gathered output (each rank sends size/{n}); GB/s = 1e9 bytes/s")
        print(f"# {'':>8} | {'all_reduce':>10} {'':>9} {'':>9} | {'all_gather':>10} {'':>9} {'':>9}")
        print(f"# {'size':>8} | {'time(us)':>10} {'algbw':>9} {'busbw':>9} | {'time(us)':>10} {'algbw':>9} {'busbw':>9}",
              flush=True)

    timer = OpTimer(device, n, local_rank)

    def measurement(collective, size, nbytes, count, seconds, factor):
        alg = nbytes / seconds / 1e9
        return {"framework": "torch", "backend": args.backend, "collective": collective, "dtype": args.dtype,
                "nranks": n, "size": size, "bytes": nbytes, "count": count, "time_us": seconds * 1e6,
                "alg_bw_gbps": alg, "bus_bw_gbps": alg * factor, "iters": args.iters, "warmup": args.warmup,
                "device": device_name, "nccl_version": nccl_version, "torch_version": torch.__version__}

    def cell(m):
        if m is None:
            return f"{'-':>10} {'-':>9} {'-':>9}"
        return f"{m['time_us']:>10.2f} {m['alg_bw_gbps']:>9.2f} {m['bus_bw_gbps']:>9.2f}"

    size = min_bytes
    while size <= max_bytes:
        reduce = gather = None
        count = size // elem
        if count >= 1:
            if args.check:
                buf = torch.full((count,), rank + 1, dtype=dtype, device=device)
                dist.all_reduce(buf)
                for i in (0, count // 2, count - 1):
                    expect(buf, i, n * (n + 1) / 2, f"all_reduce check at {size_label(size)}")
                del buf
            buf = torch.zeros(count, dtype=dtype, device=device)
            seconds = timer.mean_seconds(lambda: dist.all_reduce(buf), args.warmup, args.iters)
            reduce = measurement("all_reduce", size, count * elem, count, seconds, 2 * (n - 1) / n)
            del buf
        per_rank = count // n
        if per_rank >= 1:
            inp = torch.full((per_rank,), rank + 1, dtype=dtype, device=device)
            output = torch.empty(per_rank * n, dtype=dtype, device=device)
            if gather_into_tensor:
                op = lambda: dist.all_gather_into_tensor(output, inp)  # noqa: E731
            else:
                chunks = list(output.chunk(n))
                op = lambda: dist.all_gather(chunks, inp)  # noqa: E731
            if args.check:
                op()
                for r in range(n):
                    expect(output, r * per_rank, r + 1, f"all_gather check at {size_label(size)}")
                    expect(output, (r + 1) * per_rank - 1, r + 1, f"all_gather check at {size_label(size)}")
            seconds = timer.mean_seconds(op, args.warmup, args.iters)
            gather = measurement("all_gather", size, per_rank * n * elem, per_rank * n, seconds, (n - 1) / n)
            del inp, output
        if rank == 0:
            for m in (reduce, gather):
                if m is not None and out is not None:
                    out.write(json.dumps(m) + "\n")
                    out.flush()
            print(f"  {size_label(size):>8} | {cell(reduce)} | {cell(gather)}", flush=True)
        size *= 2
    timer.barrier()
    if out is not None:
        out.close()
    dist.destroy_process_group()


def spawned(index, world, init_method, args):
    run(index, world, index, init_method, args)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    p.add_argument("--nproc", type=int, default=0,
                   help="processes to spawn when not under torchrun (default: every GPU for nccl, 2 for gloo)")
    p.add_argument("--min-bytes", default="1K")
    p.add_argument("--max-bytes", default="", help="default 1G for nccl, 16M for gloo")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    p.add_argument("--json", default="", help="rank 0 writes one JSON line per collective and size here")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="skip the correctness check before timing each size")
    args = p.parse_args()
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be at least 1 and --warmup at least 0")
    parse_size(args.min_bytes)
    if args.max_bytes:
        parse_size(args.max_bytes)
    if args.backend == "nccl" and not torch.cuda.is_available():
        p.error("--backend nccl needs CUDA, and torch sees no GPU (use --backend gloo)")

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:  # torchrun
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0")),
            "env://", args)
        return
    nproc = args.nproc or (torch.cuda.device_count() if args.backend == "nccl" else 2)
    if args.backend == "nccl" and nproc > torch.cuda.device_count():
        p.error(f"--nproc {nproc} needs one GPU per rank, and torch sees {torch.cuda.device_count()}")
    mp.spawn(spawned, args=(nproc, f"tcp://127.0.0.1:{free_port()}", args), nprocs=nproc, join=True)


if __name__ == "__main__":
    sys.exit(main())
