#!/usr/bin/env python3
"""Hugging Face tokenizers' twin of bench_tokenizer: the same files (plain files of the corpus folder; .dat, .u8 and
links skipped), one encode call per file (add_special_tokens False), one thread (TOKENIZERS_PARALLELISM=false,
RAYON_NUM_THREADS=1; encode of one text does not use the pool anyway), one warm-up pass, the median MB/s (10^6 bytes
of UTF-8 input per second) over the repeats. Encode always computes offsets, so it compares with retort's
ids+offsets and ids modes alike. --documents: one call per fortune entry (the text between "%" lines), as
bench_tokenizer --documents."""
import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

import argparse
import json
import statistics
import time

from tokenizers import Tokenizer, __version__


def corpus_texts(folder):
    texts = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            texts.append(f.read().decode("utf-8", errors="replace"))
    return texts


def fortune_entries(text):
    entries, current = [], []
    # Lines cut at "\n" only, as bench_tokenizer does (str.splitlines would also cut at \r, \f and others).
    lines = [piece + "\n" for piece in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    for line in lines:
        if line in ("%\n", "%"):
            if current:
                entries.append("".join(current))
            current = []
        else:
            current.append(line)
    if "".join(current):  # the "" after a file's last newline is no entry
        entries.append("".join(current))
    return entries


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", action="append", required=True, help="NAME=PATH of a tokenizer.json")
    parser.add_argument("--corpus", default="/usr/share/games/fortunes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--documents", action="store_true", help="one encode call per fortune entry")
    parser.add_argument("--json")
    args = parser.parse_args()
    texts = corpus_texts(args.corpus)
    if args.documents:
        texts = [entry for text in texts for entry in fortune_entries(text)]
    total = sum(len(t.encode("utf-8")) for t in texts)
    for spec in args.tokenizer:
        name, path = spec.split("=", 1)
        start = time.perf_counter()
        tok = Tokenizer.from_file(path)
        load_s = time.perf_counter() - start

        def one_pass():
            tokens = 0
            start = time.perf_counter()
            for text in texts:
                tokens += len(tok.encode(text, add_special_tokens=False).ids)
            return time.perf_counter() - start, tokens

        one_pass()
        runs = [one_pass() for _ in range(args.repeats)]
        mb_s = statistics.median(total / seconds / 1e6 for seconds, _ in runs)
        print(f"{name:<10} {'hf':<12} {mb_s:8.2f} MB/s  ({len(texts)} calls, {total} bytes, {runs[0][1]} tokens, "
              f"load {load_s:.2f} s, tokenizers {__version__})")
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"bench": "tokenizer_encode", "impl": "hf_tokenizers", "tokenizer": name,
                                    "mode": "ids+offsets" + ("/documents" if args.documents else ""), "mb_per_s": mb_s, "bytes": total, "calls": len(texts),
                                    "tokens": runs[0][1], "load_s": load_s, "threads": 1,
                                    "tokenizers_version": __version__}) + "\n")


if __name__ == "__main__":
    main()
