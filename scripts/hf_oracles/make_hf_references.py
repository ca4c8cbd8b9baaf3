#!/usr/bin/env python3
"""Reference files for retort's Hugging Face parity tests, made with transformers and tokenizers.

Writes, under OUT (default tests/data/hf):
  tokenizers/stress.txt                the stress text (CJK, emoji, combining marks, digit and whitespace runs,
                                       CRLF, tabs, special tokens inside text)
  tokenizers/<name>/golden.json        for each tokenizer.json given with --tokenizer NAME=PATH, and for the tiny
                                       models' own tokenizer: the stress text's ids and character offsets (with and
                                       without the post-processor's special tokens) and, for every file of the
                                       fortunes corpus, the token count and FNV-1a 64 hashes of the ids and the
                                       offsets, whole and per chunk of 1024 tokens (to locate a difference)
  models/<name>/                       tiny random models saved by save_pretrained (config.json, safetensors,
                                       tokenizer.json), one per family and option
  models/<name>/reference.safetensors  input_ids [2, 12], the logits in float32, the mean next-token cross-entropy
                                       and its gradient for a few parameters ("grad.<hf name>")

The hashes: FNV-1a 64 over the little-endian int32 values (ids; offsets as start, end pairs), as 16 hex digits.
Run where torch, transformers and tokenizers are installed:
  python3 scripts/hf_oracles/make_hf_references.py --fortunes /usr/share/games/fortunes \
      --tokenizer llama3=data/hf/llama3/tokenizer.json --tokenizer qwen3=data/hf/qwen3/tokenizer.json
"""
import argparse
import json
import os
import struct

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

STRESS_TEXT = (
    "Hello, world! It's 2026; we'll see... I'M HERE, you're there, they've gone, she'd go.\n"
    "Numbers: 1234567890 3.14159 -42 1,000,000 0x7fff 12345678901234567890\n"
    "Whitespace:   three spaces\there a tab\t\ttwo tabs   \n\n\nthree newlines\r\nCRLF\rCR only\n"
    "        eight leading spaces and trailing   \n"
    "CJK: 日本語のテキスト、中文文本，한국어 텍스트。\n"
    "Emoji: 😀🎉👍🏽 family: 👨\u200d👩\u200d👧\u200d👦 flags: 🇫🇷🇯🇵\n"
    "Combining: e\u0301 a\u0308 n\u0303 Zalgo: Z\u0351\u0313a\u0350l\u033fg\u0363o\u0346\n"
    "Accents: café naïve résumé Ångström façade Straße\n"
    "Special tokens inside text: <|begin_of_text|>hi<|end_of_text|> <|endoftext|><|im_start|>user\n"
    "hi<|im_end|> <think>x</think>\n"
    "Symbols: ~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./ «quotes» “curly” — dash … ellipsis\n"
    "Mixed: abc123def 4567abc a1b2c3 ١٢٣ ٤٥٦ Ⅻ ½ ²\n"
    "Code:\n    def f(x):\n        return x ** 2  # square\n\n"
    "Long run: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!!!!!!!! ..........\n"
    "Greek: αβγ ΔΕΖ Cyrillic: Привет мир Arabic: مرحبا Hebrew: שלום Hindi: नमस्ते Thai: สวัสดี\n"
    "end"
)


def fnv1a64(values):
    h = 0xCBF29CE484222325
    for byte in b"".join(struct.pack("<i", v) for v in values):
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def fortune_files(folder):
    names = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        names.append(name)
    return names


def golden_for(tokenizer, fortunes):
    plain = tokenizer.encode(STRESS_TEXT, add_special_tokens=False)
    special = tokenizer.encode(STRESS_TEXT, add_special_tokens=True)
    golden = {
        "stress": {
            "ids": plain.ids,
            "offsets": [list(o) for o in plain.offsets],
            "ids_with_special_tokens": special.ids,
            "decoded": tokenizer.decode(plain.ids, skip_special_tokens=False),
        },
        "vocab_size_with_added": tokenizer.get_vocab_size(with_added_tokens=True),
        "fortunes": [],
    }
    for name in fortune_files(fortunes):
        with open(os.path.join(fortunes, name), "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        enc = tokenizer.encode(text, add_special_tokens=False)
        flat_offsets = [v for o in enc.offsets for v in o]
        chunks = []
        for start in range(0, len(enc.ids), 1024):
            chunks.append([fnv1a64(enc.ids[start:start + 1024]), fnv1a64(flat_offsets[2 * start:2 * start + 2048])])
        golden["fortunes"].append({
            "file": name,
            "count": len(enc.ids),
            "ids_hash": fnv1a64(enc.ids),
            "offsets_hash": fnv1a64(flat_offsets),
            "chunks": chunks,
            "first_ids": enc.ids[:64],
            "round_trip": tokenizer.decode(enc.ids) == text,
        })
    return golden


def train_tiny_tokenizer(fortunes, path):
    """A GPT-2 style byte-level BPE (ByteLevel pre-tokenizer with its own regex) of 384 ids, trained on fortunes."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    files = [os.path.join(fortunes, n) for n in fortune_files(fortunes)]
    tok.train(files, trainer)
    tok.save(path)
    return tok


def tiny_models():
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=64, bos_token_id=0, eos_token_id=0, attention_dropout=0.0)
    return [
        # GQA, tied head, llama3 frequency scaling over all three wavelength bands (head_dim 8, theta 500000).
        ("llama3_gqa_tied", LlamaConfig, dict(common, vocab_size=384, num_key_value_heads=2, rms_norm_eps=1e-5,
                                               tie_word_embeddings=True,
                                               rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                                                "factor": 32.0, "low_freq_factor": 1.0,
                                                                "high_freq_factor": 4.0,
                                                                "original_max_position_embeddings": 64}),
         torch.float32, None),
        # Multi-head, untied head, plain RoPE, sharded into several safetensors files with an index.
        ("llama_mha_untied_sharded", LlamaConfig, dict(common, vocab_size=384, num_key_value_heads=4,
                                                       rms_norm_eps=1e-5, tie_word_embeddings=False,
                                                       rope_parameters={"rope_type": "default",
                                                                        "rope_theta": 10000.0}),
         torch.float32, "40KB"),
        # q/k/v biases, GQA, tied; stored in bf16.
        ("qwen2_bias_bf16", Qwen2Config, dict(common, vocab_size=384, num_key_value_heads=2, rms_norm_eps=1e-6,
                                              tie_word_embeddings=True,
                                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         torch.bfloat16, None),
        # q/k norm, explicit head_dim 16 (heads x head_dim != hidden), GQA, untied, a head of 390 rows (more than
        # the tokenizer's 384 ids, and not a multiple of 4); stored in f16.
        ("qwen3_qknorm_f16", Qwen3Config, dict(common, vocab_size=390, num_key_value_heads=2, head_dim=16,
                                               rms_norm_eps=1e-6, tie_word_embeddings=False,
                                               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         torch.float16, None),
    ]


def make_model(name, config_class, kwargs, dtype, shard, tokenizer_path, out):
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    torch.manual_seed(1234)
    config = config_class(**kwargs)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():  # larger than the 0.02 init, so every part of the math shows in the logits
            p.copy_(torch.randn_like(p) * 0.3)
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or "layernorm" in n:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    folder = os.path.join(out, "models", name)
    os.makedirs(folder, exist_ok=True)
    model.to(dtype)
    save_kwargs = {"safe_serialization": True}
    if shard:
        save_kwargs["max_shard_size"] = shard
    model.save_pretrained(folder, **save_kwargs)
    with open(tokenizer_path) as f, open(os.path.join(folder, "tokenizer.json"), "w") as g:
        g.write(f.read())
    # The reference: the saved weights, read back into float32.
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 384, (2, 12), generator=gen)
    logits = ref(input_ids=ids).logits.float()
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
    loss.backward()
    tensors = {"input_ids": ids.to(torch.int32).contiguous(), "logits": logits.detach().contiguous(),
               "loss": loss.detach().reshape(1)}
    keep = ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.0.")
    for n, p in ref.named_parameters():
        if p.grad is not None and n.startswith(keep):
            tensors["grad." + n] = p.grad.detach().float().contiguous()
    save_file(tensors, os.path.join(folder, "reference.safetensors"))
    with open(os.path.join(folder, "config.json")) as f:
        saved = json.load(f)
    print(name, "saved config:", json.dumps(saved, sort_keys=True))
    print(name, "files:", sorted(os.listdir(folder)), "loss", float(loss))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fortunes", default="/usr/share/games/fortunes")
    parser.add_argument("--tokenizer", action="append", default=[], help="NAME=PATH of a tokenizer.json")
    parser.add_argument("--out", default="tests/data/hf")
    args = parser.parse_args()
    os.makedirs(os.path.join(args.out, "tokenizers"), exist_ok=True)
    with open(os.path.join(args.out, "tokenizers", "stress.txt"), "w", newline="") as f:
        f.write(STRESS_TEXT)
    tiny_path = os.path.join(args.out, "tokenizers", "tiny_gpt2_style", "tokenizer.json")
    os.makedirs(os.path.dirname(tiny_path), exist_ok=True)
    train_tiny_tokenizer(args.fortunes, tiny_path)
    named = [("tiny_gpt2_style", tiny_path)] + [tuple(t.split("=", 1)) for t in args.tokenizer]
    for name, path in named:
        golden = golden_for(Tokenizer.from_file(path), args.fortunes)
        folder = os.path.join(args.out, "tokenizers", name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "golden.json"), "w") as f:
            json.dump(golden, f, ensure_ascii=False, indent=0)
        print(name, "stress tokens", len(golden["stress"]["ids"]), "fortune files", len(golden["fortunes"]))
    for name, cls, kwargs, dtype, shard in tiny_models():
        make_model(name, cls, kwargs, dtype, shard, tiny_path, args.out)


if __name__ == "__main__":
    main()
