#!/usr/bin/env python3
"""Tiny random-weight Qwen3.5 / Qwen3-Next checkpoints + transformers reference outputs for the CPU tests.

Run from the repository root with the torch-equipped interpreter (CI has no torch: the outputs are committed):

    /work/pyenv/bin/python tools/make_qwen35_fixtures.py

Writes three checkpoint directories under tests/fixtures/, each in the layout transformers saves them in:

  qwen3_5/         Qwen3_5ForConditionalGeneration (text_config nesting, `model.language_model.` prefix, a tiny
                   vision tower that the engine must ignore), BF16 weights with BF16 A_log (as Qwen3.6-27B), six
                   layers L L F L L F, Hk=2 / Hv=6 and dk != dv, untied lm_head, random `mtp.*` tensors.
  qwen3_5_causal/  Qwen3_5ForCausalLM (flat text config, `model.` prefix), tied embeddings, F32 A_log.
  qwen3_next/      Qwen3NextForCausalLM with num_experts=0 (dense MLP everywhere) and the fused
                   in_proj_qkvz / in_proj_ba projections.

and in each a reference.safetensors with, for prompts of 1, 5, 70 and 130 tokens (the last two cross the 64-token
chunk boundary of the DeltaNet prefill), `prompt_N` (I32 ids) and `logits_N` (F32 [N, vocab], every position),
plus `greedy_prompt` / `greedy_tokens` (64 tokens of HF greedy generation with its cache, i.e. the recurrent decode
path). The model runs in float32 with its weights rounded to bf16 first, so the stored BF16 weights are exactly the
weights the reference used. `greedy_min_margin` (metadata) is the smallest top1-top2 logit gap met while decoding:
the C++ test's tolerance must stay well under it for "greedy tokens identical" to be a fair check.
"""
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5TextConfig,
                          Qwen3NextConfig, Qwen3NextForCausalLM)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
VOCAB = 512
PROMPT_LENS = (1, 5, 70, 130)
N_GREEDY = 64
EMBED_STD = float(os.environ.get("EMBED_STD", "0.15"))


def text_kwargs(layer_types, hk, hv, dk, dv, tie):
    return dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=len(layer_types),
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, layer_types=layer_types,
        linear_conv_kernel_dim=4, linear_key_head_dim=dk, linear_value_head_dim=dv, linear_num_key_heads=hk,
        linear_num_value_heads=hv, rms_norm_eps=1e-6, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        initializer_range=0.08, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2, pad_token_id=None,
        hidden_act="silu", attention_bias=False)


@torch.no_grad()
def randomize(model, gen, embed_std=1.0):
    """Non-trivial values everywhere (zero-init (1+w) norms and constant dt_bias would hide bugs), rounded to bf16."""
    for name, p in model.named_parameters():
        if name.endswith("A_log"):
            p.copy_(torch.empty_like(p).uniform_(0.0, 2.5, generator=gen))
        elif name.endswith("dt_bias"):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.8)
        elif name.endswith("linear_attn.norm.weight"):  # plain-w gated norm
            p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.3)
        elif p.ndim == 1:  # (1 + w) norms
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        elif "conv1d" in name:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
        elif "embed_tokens" in name:
            p.copy_(torch.randn(p.shape, generator=gen) * embed_std)
        else:
            fan_in = p.shape[-1]
            p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
        p.copy_(p.to(torch.bfloat16).float())


def prompts(gen):
    out = {}
    for n in PROMPT_LENS:
        out[n] = torch.randint(3, VOCAB, (n,), generator=gen, dtype=torch.int64)
    return out


@torch.no_grad()
def reference(model, gen, last_rows):
    """last_rows=None keeps the logits of every position; else only the last `last_rows` (smaller fixtures)."""
    tensors = {}
    for n, ids in prompts(gen).items():
        logits = model(input_ids=ids[None]).logits[0].float()
        tensors[f"prompt_{n}"] = ids.to(torch.int32)
        tensors[f"logits_{n}"] = (logits if last_rows is None else logits[-last_rows:]).contiguous()
    gp = torch.randint(3, VOCAB, (5,), generator=gen, dtype=torch.int64)
    out = model.generate(input_ids=gp[None], max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
    tokens = out.sequences[0, gp.numel():]
    margin = float("inf")
    for step in out.logits:
        top = torch.topk(step[0].float(), 2).values
        margin = min(margin, float(top[0] - top[1]))
    tensors["greedy_prompt"] = gp.to(torch.int32)
    tensors["greedy_tokens"] = tokens.to(torch.int32).contiguous()
    if last_rows is None:  # decode-step logits of the greedy run (HF's own recurrent path)
        tensors["greedy_logits"] = torch.stack([s[0].float() for s in out.logits]).contiguous()
    return tensors, margin


def mtp_tensors(text_cfg, gen, ref_dtype):
    """Random `mtp.*` tensors shaped as the Qwen3.5 MTP head (one full-attention layer + fc + three norms)."""
    h, i = text_cfg.hidden_size, text_cfg.intermediate_size
    nh, nkv, hd = text_cfg.num_attention_heads, text_cfg.num_key_value_heads, text_cfg.head_dim
    shapes = {
        "mtp.fc.weight": (h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": (h,), "mtp.pre_fc_norm_hidden.weight": (h,), "mtp.norm.weight": (h,),
        "mtp.layers.0.input_layernorm.weight": (h,), "mtp.layers.0.post_attention_layernorm.weight": (h,),
        "mtp.layers.0.self_attn.q_proj.weight": (2 * nh * hd, h),
        "mtp.layers.0.self_attn.k_proj.weight": (nkv * hd, h),
        "mtp.layers.0.self_attn.v_proj.weight": (nkv * hd, h),
        "mtp.layers.0.self_attn.o_proj.weight": (h, nh * hd),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,), "mtp.layers.0.self_attn.k_norm.weight": (hd,),
        "mtp.layers.0.mlp.gate_proj.weight": (i, h), "mtp.layers.0.mlp.up_proj.weight": (i, h),
        "mtp.layers.0.mlp.down_proj.weight": (h, i),
    }
    return {k: (torch.randn(s, generator=gen) * 0.1).to(ref_dtype) for k, s in shapes.items()}


def save(model, out_dir, gen, extra=None, keep_f32=()):
    """save_pretrained in bf16 (the published layout), then rewrite model.safetensors with `keep_f32` tensors in
    F32 and the `extra` tensors added."""
    os.makedirs(out_dir, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    path = os.path.join(out_dir, "model.safetensors")
    with safe_open(path, "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = f.metadata()
    for k in tensors:
        if any(k.endswith(s) for s in keep_f32):
            tensors[k] = tensors[k].float()
    tensors.update(extra or {})
    save_file(tensors, path, metadata=meta)
    return sorted(tensors)


def write_reference(cls, out_dir, gen, info, last_rows=None):
    # From the files on disk, not the in-memory model: save_pretrained's bf16 cast also rounds the rotary
    # inv_freq buffer, which would otherwise leak into the reference.
    model = cls.from_pretrained(out_dir, dtype=torch.float32).eval()
    tensors, margin = reference(model, gen, last_rows)
    info = dict(info, greedy_min_margin=f"{margin:.6g}", prompt_lens=",".join(map(str, PROMPT_LENS)))
    save_file(tensors, os.path.join(out_dir, "reference.safetensors"), metadata=info)
    print(f"{out_dir}: greedy min top1-top2 margin {margin:.4g}; max |logit| "
          f"{max(float(t.abs().max()) for k, t in tensors.items() if k.startswith('logits')):.3g}")


def make_qwen3_5(gen):
    lt = ["linear_attention", "linear_attention", "full_attention", "linear_attention", "linear_attention",
          "full_attention"]
    text = text_kwargs(lt, hk=2, hv=6, dk=16, dv=24, tie=False)
    text["mtp_num_hidden_layers"] = 1
    text["mtp_use_dedicated_embeddings"] = False
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16)
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False)
    torch.manual_seed(1)
    model = Qwen3_5ForConditionalGeneration(cfg).float().eval()
    randomize(model, gen)
    out = os.path.join(ROOT, "qwen3_5")
    names = save(model, out, gen, extra=mtp_tensors(cfg.text_config, gen, torch.bfloat16))
    assert any(n.startswith("model.language_model.layers.0.linear_attn.") for n in names), names[:10]
    write_reference(Qwen3_5ForConditionalGeneration, out, gen, {"architecture": "Qwen3_5ForConditionalGeneration"})


def make_qwen3_5_causal(gen):
    lt = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
    cfg = Qwen3_5TextConfig(**text_kwargs(lt, hk=2, hv=4, dk=16, dv=16, tie=True))
    torch.manual_seed(2)
    model = Qwen3_5ForCausalLM(cfg).float().eval()
    # A tied head reads the residual stream with the embedding matrix: with large embeddings every token predicts
    # itself, so keep them small for a greedy run that moves.
    randomize(model, gen, embed_std=EMBED_STD)
    model.tie_weights()
    out = os.path.join(ROOT, "qwen3_5_causal")
    names = save(model, out, gen, keep_f32=("A_log",))
    assert "model.layers.0.linear_attn.A_log" in names and "lm_head.weight" not in names, names[:10]
    write_reference(Qwen3_5ForCausalLM, out, gen, {"architecture": "Qwen3_5ForCausalLM"}, last_rows=8)


def make_qwen3_next(gen):
    lt = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
    kw = text_kwargs(lt, hk=2, hv=4, dk=16, dv=16, tie=False)
    kw["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
    cfg = Qwen3NextConfig(**kw, num_experts=0, mlp_only_layers=[], decoder_sparse_step=1)
    torch.manual_seed(3)
    model = Qwen3NextForCausalLM(cfg).float().eval()
    randomize(model, gen)
    out = os.path.join(ROOT, "qwen3_next")
    names = save(model, out, gen)
    assert "model.layers.0.linear_attn.in_proj_qkvz.weight" in names, names[:10]
    assert not any("experts" in n for n in names)
    write_reference(Qwen3NextForCausalLM, out, gen, {"architecture": "Qwen3NextForCausalLM"}, last_rows=8)


def main():
    gen = torch.Generator().manual_seed(1234)
    which = sys.argv[1:] or ["qwen3_5", "qwen3_5_causal", "qwen3_next"]
    for w in which:
        {"qwen3_5": make_qwen3_5, "qwen3_5_causal": make_qwen3_5_causal, "qwen3_next": make_qwen3_next}[w](gen)
    for w in which:
        d = os.path.join(ROOT, w)
        with open(os.path.join(d, "config.json")) as f:
            json.load(f)  # well-formed
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{w}: {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
