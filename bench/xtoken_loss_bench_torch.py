#!/usr/bin/env python3
"""The PyTorch twin of bench_xtoken_loss: the chunk-averaged KL and the gold loss of losses/chunk_distillation.h,
written as a PyTorch user would, dense over the vocabularies with index ops and autograd (the student's softmax
[N_s, V_s], the projection as a sparse CSR matrix, the teacher's full log-probabilities [N_t, V_t] rebuilt from its
top-k, chunk means by index_add_), forward + backward at the same shape and alignment statistics. The projection's
transpose is built once, outside the timing (a user would keep it); everything that depends on the batch is timed.
Writes the same JSON fields as the C++ program.
    python3 bench/xtoken_loss_bench_torch.py --json torch.jsonl
    python3 bench/xtoken_loss_bench_torch.py --device cpu --positions 256 --student-vocab 4096 --teacher-vocab 5000
"""
import argparse
import datetime
import json
import math
import random
import statistics
import subprocess
import time

import torch


def make_problem(positions, vs, vt, k, dtype, device, seed=42):
    rnd = random.Random(seed)
    sc, tc, chunk = [], [], 0
    while len(sc) < positions:
        if rnd.randrange(20) == 0:
            sc.append(-1)
            tc.append(-1)
            continue
        ns, nt = rnd.randint(1, 3), rnd.randint(1, 3)
        for _ in range(ns):
            if len(sc) < positions:
                sc.append(chunk)
        tc += [chunk] * nt
        chunk += 1
    torch.manual_seed(seed)
    p = {"chunks": chunk, "teacher_rows": len(tc)}
    p["student_chunk"] = torch.tensor(sc, dtype=torch.long, device=device)
    p["teacher_chunk"] = torch.tensor(tc, dtype=torch.long, device=device)
    p["logits"] = (torch.randn(positions, vs, device=device) * 2).to(dtype)
    # K distinct teacher ids per position (the top k of random keys, drawn on the device), log-probs holding 90% of
    # the mass.
    keys = torch.rand(len(tc), vt, device=device)
    p["teacher_ids"] = keys.topk(k, dim=-1).indices
    del keys
    raw = torch.randn(len(tc), k, device=device) * 2
    p["teacher_logprobs"] = torch.log_softmax(raw, -1) + math.log(0.9)
    # Projection rows: 1 entry (70%), 2 (20%), 3 (8%) or none (2%), weights 0.9 * 0.1^i normalised.
    rows, cols, vals, common_s, common_t, seen = [], [], [], [], [], set()
    for u in range(vs):
        roll = rnd.randrange(100)
        n = 1 if roll < 70 else 2 if roll < 90 else 3 if roll < 98 else 0
        total = sum(0.9 * 0.1**i for i in range(n))
        for i in range(n):
            v = rnd.randrange(vt)
            rows.append(u)
            cols.append(v)
            vals.append(0.9 * 0.1**i / total)
        if n == 1 and cols[-1] not in seen:
            seen.add(cols[-1])
            common_s.append(u)
            common_t.append(cols[-1])
    # W^T [V_t, V_s], sparse COO (torch.sparse.mm differentiates the dense operand of a COO matrix): q W =
    # (W^T q^T)^T; coalescing sums duplicate entries.
    wt = torch.sparse_coo_tensor(torch.tensor([cols, rows]), torch.tensor(vals, dtype=torch.float32), (vt, vs))
    p["projection_t"] = wt.coalesce().to(device)
    p["common_student"] = torch.tensor(common_s, dtype=torch.long, device=device)
    p["common_teacher"] = torch.tensor(common_t, dtype=torch.long, device=device)
    return p


def teacher_side(p, vt, k):
    """Valid chunks, the teacher's dense log-probs per position and their chunk means R [C, V_t]."""
    sc, tc, chunks = p["student_chunk"], p["teacher_chunk"], p["chunks"]
    ns = torch.zeros(chunks, device=sc.device).index_add_(0, sc.clamp(min=0), (sc >= 0).float())
    nt = torch.zeros(chunks, device=sc.device).index_add_(0, tc.clamp(min=0), (tc >= 0).float())
    valid = (ns > 0) & (nt > 0)
    t_rows = (tc >= 0) & valid[tc.clamp(min=0)]
    lp = p["teacher_logprobs"][t_rows]
    ids = p["teacher_ids"][t_rows]
    t_chunk = tc[t_rows]
    lse = torch.logsumexp(lp, -1).clamp(max=-1e-7)
    log_rest = torch.log(-torch.expm1(lse))
    dense = (log_rest - math.log(vt - k))[:, None].expand(-1, vt).clone()
    dense.scatter_(1, ids, lp)
    R = torch.zeros(chunks, vt, device=dense.device).index_add_(0, t_chunk, dense) / nt.clamp(min=1)[:, None]
    member = torch.zeros(chunks, vt, dtype=torch.bool, device=dense.device)
    member[t_chunk[:, None].expand(-1, k), ids] = True
    return valid, ns, nt, dense, t_chunk, R, member


def chunk_kl(p, T, vt, k):
    valid, ns, nt, dense, t_chunk, R, member = teacher_side(p, vt, k)
    sc = p["student_chunk"]
    s_rows = (sc >= 0) & valid[sc.clamp(min=0)]
    q = torch.softmax(p["logits"].float() / T, -1)
    projected = torch.sparse.mm(p["projection_t"], q[s_rows].t()).t()  # [rows, V_t]
    Q = torch.zeros(p["chunks"], vt, device=q.device).index_add_(0, sc[s_rows], projected) / ns.clamp(min=1)[:, None]
    outside = ~member
    q_rest = (Q * outside).sum(-1)
    # The teacher's rest: the chunk mean of the log of each position's mass outside S_c.
    t_rest = torch.log((dense.exp() * outside[t_chunk]).sum(-1))
    r_rest = torch.zeros(p["chunks"], device=q.device).index_add_(0, t_chunk, t_rest) / nt.clamp(min=1)
    terms = torch.where(member & (R > -math.inf), R.exp() * (R - torch.log(Q + 1e-10)), torch.zeros_like(R))
    rest = torch.where(r_rest > -math.inf, r_rest.exp() * (r_rest - torch.log(q_rest + 1e-10)), torch.zeros_like(r_rest))
    kl = (terms.sum(-1) + rest)[valid].sum()
    return T * T * kl / valid.sum().clamp(min=1)


def gold(p, T, vt, k, top):
    valid, ns, nt, dense, t_chunk, R, member = teacher_side(p, vt, k)
    sc = p["student_chunk"]
    s_rows = (sc >= 0) & valid[sc.clamp(min=0)]
    logq = torch.log_softmax(p["logits"].float() / T, -1)
    vs = logq.shape[1]
    LS = torch.zeros(p["chunks"], vs, device=logq.device).index_add_(0, sc[s_rows], logq[s_rows])
    LS = LS / ns.clamp(min=1)[:, None]
    LS, R = LS[valid], R[valid]
    cs, ct = p["common_student"], p["common_teacher"]
    Rc = R[:, ct]
    kl = torch.where(Rc > -math.inf, Rc.exp() * (Rc - LS[:, cs]), torch.zeros_like(Rc)).sum()
    uncommon_s = torch.ones(vs, dtype=torch.bool, device=LS.device)
    uncommon_s[cs] = False
    uncommon_t = torch.ones(vt, dtype=torch.bool, device=LS.device)
    uncommon_t[ct] = False
    a = LS[:, uncommon_s].exp()
    b = R[:, uncommon_t].exp()
    a = a.topk(min(top, a.shape[1]), dim=-1).values
    b = b.topk(min(top, b.shape[1]), dim=-1).values
    width = max(a.shape[1], b.shape[1])
    a = torch.nn.functional.pad(a, (0, width - a.shape[1]))
    b = torch.nn.functional.pad(b, (0, width - b.shape[1]))
    l1 = (a - b).abs().sum()
    return T * T * (kl + l1) / valid.sum().clamp(min=1)


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--losses", default="chunk_kl,gold")
    ap.add_argument("--positions", type=int, default=4096)
    ap.add_argument("--student-vocab", type=int, default=128256)
    ap.add_argument("--teacher-vocab", type=int, default=151936)
    ap.add_argument("--topk", type=int, default=32)
    ap.add_argument("--gold-top", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    device = torch.device(a.device)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    p = make_problem(a.positions, a.student_vocab, a.teacher_vocab, a.topk, dtype, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"cross-tokenizer losses in PyTorch on {name} ({a.dtype}), {a.positions} student positions, "
          f"{p['teacher_rows']} teacher positions, {p['chunks']} chunks")
    logits = p["logits"].requires_grad_()
    for loss_name in a.losses.split(","):
        fn = {"chunk_kl": lambda: chunk_kl(p, 1.0, a.teacher_vocab, a.topk),
              "gold": lambda: gold(p, 1.0, a.teacher_vocab, a.topk, a.gold_top)}[loss_name]
        samples, peak, value, status = [], None, None, "ok"
        try:
            for run in range(a.repeats + 1):
                logits.grad = None
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                    base = torch.cuda.memory_allocated(device)
                    torch.cuda.reset_peak_memory_stats(device)
                start = time.perf_counter()
                loss = fn()
                loss.backward()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if run == 0:
                    continue
                samples.append(1e3 * (time.perf_counter() - start))
                value = loss.item()
                if device.type == "cuda":
                    peak = max(peak or 0, torch.cuda.max_memory_allocated(device) - base)
        except torch.cuda.OutOfMemoryError:
            status = "oom"
        med = statistics.median(samples) if samples else None
        print(f"{loss_name:>10} {med if med is None else round(med, 3):>12} ms  peak extra "
              f"{'-' if peak is None else round(peak / 2**20, 1)} MiB  loss {value}")
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps({"framework": "torch", "loss": loss_name, "status": status, "device": name,
                                    "dtype": a.dtype, "positions": a.positions, "teacher_positions": p["teacher_rows"],
                                    "chunks": p["chunks"], "student_vocab": a.student_vocab,
                                    "teacher_vocab": a.teacher_vocab, "topk": a.topk, "gold_top": a.gold_top,
                                    "time_ms": med, "min_ms": min(samples) if samples else None,
                                    "peak_extra_bytes": peak, "loss_value": value, "commit": commit(),
                                    "date": datetime.datetime.now().isoformat(timespec="seconds")}) + "\n")


if __name__ == "__main__":
    main()
