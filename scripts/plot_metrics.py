#!/usr/bin/env python3
"""Plots training and validation loss from one or more runs' metrics.jsonl (needs python3-matplotlib).

    scripts/plot_metrics.py OUT.png RUN_DIR[=LABEL] [RUN_DIR[=LABEL] ...] [--baseline VALUE=LABEL]
"""
import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(run_dir):
    rows = [json.loads(line) for line in open(pathlib.Path(run_dir) / "metrics.jsonl") if line.strip()]
    return [r for r in rows if "step" in r]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("runs", nargs="+")
    p.add_argument("--baseline", action="append", default=[], help="VALUE=LABEL: a horizontal reference line")
    p.add_argument("--title", default="")
    a = p.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for spec in a.runs:
        run_dir, _, label = spec.partition("=")
        rows = read(run_dir)
        label = label or pathlib.Path(run_dir).name
        line, = ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], lw=0.8, alpha=0.6,
                        label=f"{label}: train")
        evals = [r for r in rows if "eval_loss" in r]
        ax.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", color=line.get_color(),
                label=f"{label}: validation")
    for spec in a.baseline:
        value, _, label = spec.partition("=")
        ax.axhline(float(value), ls="--", color="gray", lw=1)
        ax.text(ax.get_xlim()[1], float(value), f" {label}", va="bottom", ha="right", color="gray", fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(a.title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out)


if __name__ == "__main__":
    main()
