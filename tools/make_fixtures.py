#!/usr/bin/env python3
"""Makes the tiny random-weight reference checkpoints under tests/fixtures/ with Hugging Face transformers.

Each fixture directory is a checkpoint in the exact published layout (config.json, model.safetensors,
generation_config.json) plus reference.safetensors holding what transformers computes for it:
  prompt_<i>     I32 [T]        token ids fed to the model (no tokenizer: ids are stored directly)
  positions_<i>  I32 [P]        which positions of prompt i have stored logits
  logits_<i>     F32 [P, V]     the fp32 logits at those positions (one forward over the whole prompt)
  greedy         I32 [16]       16 greedy tokens continuing prompt_0 (argmax, EOS not special)
  greedy_margin  F32 [16]       top-1 minus top-2 logit at each greedy step (how robust the argmax is)

The reference is computed in float32 (torch_dtype float32). A checkpoint stored in BF16 is loaded back from
the saved file, so the reference sees exactly the bf16-rounded weights the C++ loader sees.

Needs torch + transformers (not in CI: the outputs are committed). Run from the repository root:
  /work/pyenv/bin/python tools/make_fixtures.py
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers import LlamaConfig, Qwen2Config, Qwen3Config

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
VOCAB = 512
N_GREEDY = 16
CLASSIC = {"llama3_tied", "qwen3"}  # configs rewritten to top-level rope_theta / rope_scaling

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
)


def variants():
    """(name, config, storage dtype). Dims are tiny so the committed files stay small."""
    yield "llama", LlamaConfig(**COMMON, rope_theta=10000.0, tie_word_embeddings=False), torch.bfloat16
    # Llama-3 style: rope_scaling llama3 with a small original context so several frequency bands are
    # rescaled, tied embeddings (no lm_head.weight in the file), fp32 storage.
    yield "llama3_tied", LlamaConfig(
        **COMMON,
        rope_theta=500000.0,
        rope_scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=64),
        tie_word_embeddings=True,
    ), torch.float32
    yield "qwen2", Qwen2Config(**COMMON, rope_theta=1000000.0, tie_word_embeddings=False,
                               use_sliding_window=False), torch.bfloat16
    # Qwen3: head_dim 32 with 4 heads, so q_proj's output (128) differs from hidden_size (64).
    yield "qwen3", Qwen3Config(**COMMON, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=False,
                               attention_bias=False, use_sliding_window=False), torch.bfloat16


def randomize(model, gen):
    """Weights large enough that logits are far from uniform, norm weights away from 1, non-zero biases:
    a loader that drops a bias or a norm weight then changes the logits visibly."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                # 0.25: as tied lm_head this keeps logits within a few units (no saturated argmax loops).
                p.copy_(0.25 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / fan_in ** 0.5))


def prompts(gen):
    """Three prompts: BOS alone, a short one, and one longer than 64 tokens (crosses chunk boundaries)."""
    short = [1] + torch.randint(3, VOCAB, (12,), generator=gen).tolist()
    long = [1] + torch.randint(3, VOCAB, (79,), generator=gen).tolist()
    return [short, [1], long]


def stored_positions(n):
    # All positions of short prompts; a spread (incl. the 64/65 boundary and the last) for long ones.
    if n <= 16:
        return list(range(n))
    return sorted({0, 1, 7, 31, 63, 64, 65, n - 2, n - 1})


def classic_rope_keys(path):
    """transformers 5 writes `rope_parameters`; published Llama-3.x / Qwen3 configs carry top-level `rope_theta`
    and `rope_scaling`. Rewrite to that older form so both spellings are exercised by the fixtures."""
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp.pop("rope_theta")
    cfg["rope_scaling"] = None if rp.get("rope_type", "default") == "default" else rp
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def make(name, cfg, dtype, seed, classic):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    randomize(model, gen)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    model.to(dtype).save_pretrained(d)
    GenerationConfig(bos_token_id=1, eos_token_id=[2, 3]).save_pretrained(d)
    if classic:
        classic_rope_keys(os.path.join(d, "config.json"))

    # Reload from disk in fp32: exactly the stored (possibly bf16-rounded) weights.
    ref = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    out = {}
    with torch.no_grad():
        for i, ids in enumerate(prompts(gen)):
            logits = ref(torch.tensor([ids])).logits[0].float()
            pos = stored_positions(len(ids))
            out[f"prompt_{i}"] = torch.tensor(ids, dtype=torch.int32)
            out[f"positions_{i}"] = torch.tensor(pos, dtype=torch.int32)
            out[f"logits_{i}"] = logits[pos].contiguous()
        seq = out["prompt_0"].tolist()
        greedy, margin = [], []
        for _ in range(N_GREEDY):
            last = ref(torch.tensor([seq])).logits[0, -1].float()
            top = torch.topk(last, 2)
            greedy.append(int(top.indices[0]))
            margin.append(float(top.values[0] - top.values[1]))
            seq.append(greedy[-1])
    out["greedy"] = torch.tensor(greedy, dtype=torch.int32)
    out["greedy_margin"] = torch.tensor(margin, dtype=torch.float32)
    save_file(out, os.path.join(d, "reference.safetensors"))
    maxlog = max(float(out[f"logits_{i}"].abs().max()) for i in range(3))
    print(f"{name}: {dtype}, max|logit| {maxlog:.2f}, min greedy margin {min(margin):.4f}, greedy {greedy}")


def main():
    torch.set_num_threads(1)  # deterministic reductions
    for seed, (name, cfg, dtype) in enumerate(variants(), start=1234):
        make(name, cfg, dtype, seed, classic=name in CLASSIC)
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(README)
    total = sum(os.path.getsize(os.path.join(OUT, v, n))
                for v, _, _ in variants() for n in os.listdir(os.path.join(OUT, v)))
    print(f"total fixture bytes: {total}")
    return 0


README = """# Model fixtures

Tiny random-weight checkpoints (hidden 64, 2 layers, 4 heads / 2 KV heads, vocab 512) in the exact layout
Hugging Face `transformers` publishes, each with `reference.safetensors`: prompts as token ids, fp32 logits
from transformers for chosen positions, and 16 greedy tokens. Made by

    /work/pyenv/bin/python tools/make_fixtures.py

(torch 2.15 CPU, transformers 5.23; not needed in CI, the outputs are committed). Variants:

`llama3_tied` and `qwen3` have their config.json rewritten to the older published spelling (top-level
`rope_theta`, `rope_scaling`); `llama` and `qwen2` keep transformers 5's `rope_parameters`. The reference is
computed after that rewrite, from the files on disk.

| dir | architecture | what it exercises |
|---|---|---|
| `llama/` | LlamaForCausalLM, BF16 | untied lm_head, default RoPE |
| `llama3_tied/` | LlamaForCausalLM, F32 | `rope_scaling` llama3, tied embeddings (no `lm_head.weight`) |
| `qwen2/` | Qwen2ForCausalLM, BF16 | q/k/v biases |
| `qwen3/` | Qwen3ForCausalLM, BF16 | per-head q_norm/k_norm, head_dim 32 != hidden/heads |

`tests/unit/test_models.cpp` compares grimoire's CPU backend to these logits (tolerance stated there).
"""

if __name__ == "__main__":
    sys.exit(main())
