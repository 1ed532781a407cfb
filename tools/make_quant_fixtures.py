#!/usr/bin/env python3
"""Regenerates tests/fixtures/quant/: small layers in every format written by tools/quantize.py (with their
python-side dequant), and the tiny Qwen3 fixture quantized to each format with transformers' fp32 logits of the
dequantized model (torch/transformers are needed here only; the outputs are committed).

    /work/pyenv/bin/python tools/make_quant_fixtures.py [NAME...]

With NAMEs, only those variants are (re)written and the others are left as they are.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import quantize as qz  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "quant")

# name -> quantize.py arguments
LAYER_VARIANTS = {
    "gptq_sym_g128": ["--format", "gptq"],
    "gptq_asym_g32_actorder": ["--format", "gptq", "--asym", "--group", "32", "--act-order"],
    "gptq_v2_asym_g64": ["--format", "gptq_v2", "--asym", "--group", "64"],
    "gptq_v2_sym_actorder_chan": ["--format", "gptq_v2", "--group", "-1", "--act-order"],
    "autoround_gptq_asym_g128": ["--format", "autoround-gptq", "--asym"],
    "autoround_awq_asym_g64": ["--format", "autoround-awq", "--asym", "--group", "64"],
    "autoround_awq_sym_g128": ["--format", "autoround-awq"],
    "ct_sym_g32": ["--format", "ct", "--group", "32"],
    "ct_asym_g128": ["--format", "ct", "--asym"],
    "ct_asym_g64": ["--format", "ct", "--asym", "--group", "64"],
    "ct_asym_chan": ["--format", "ct", "--asym", "--group", "-1"],
    "fp8_block": ["--format", "fp8-block"],
    "fp8_channel": ["--format", "fp8-channel"],
}
MODEL_VARIANTS = {
    "qwen3_gptq": ["--format", "gptq", "--asym", "--group", "32", "--act-order"],
    "qwen3_awq": ["--format", "autoround-awq", "--asym", "--group", "32"],
    "qwen3_ct": ["--format", "ct", "--group", "32"],
    "qwen3_ct_asym": ["--format", "ct", "--asym", "--group", "32"],
    "qwen3_fp8": ["--format", "fp8-block"],
}


def random_layer_checkpoint(d):
    rng = np.random.default_rng(5)
    t = {}

    def w(name, n, k, scale=0.05):
        t[name] = ("BF16", qz.f32_to_bf16(rng.standard_normal((n, k)).astype(np.float32) * scale))

    w("layer.q_proj.weight", 48, 256)
    w("layer.up_proj.weight", 96, 128, 0.2)
    t["layer.up_proj.bias"] = ("BF16", qz.f32_to_bf16(rng.standard_normal(96).astype(np.float32)))
    w("layer.odd_proj.weight", 40, 136)   # fits no INT4 group here: stays BF16 (FP8 covers it with partial blocks)
    w("layer.kept_proj.weight", 16, 128)  # --keep: recorded as unquantized in each format's config
    qz.write_safetensors(os.path.join(d, "model.safetensors"), t)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "grimoire_quant_layer_test"}, f)


def model_reference(src, qdir):
    """transformers fp32 logits of the fixture's prompts with the dequantized weights."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(src)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    sd = {k: v.float() for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
    sd.update(load_file(os.path.join(qdir, "dequant.safetensors")))
    model.load_state_dict(sd, strict=True)
    ref = load_file(os.path.join(src, "reference.safetensors"))
    out = {}
    with torch.no_grad():
        for i in range(8):
            if f"prompt_{i}" not in ref:
                break
            ids = ref[f"prompt_{i}"].long()
            logits = model(ids[None]).logits[0]
            out[f"prompt_{i}"] = ref[f"prompt_{i}"]
            out[f"positions_{i}"] = ref[f"positions_{i}"]
            out[f"logits_{i}"] = logits[ref[f"positions_{i}"].long()].contiguous()
    from safetensors.torch import save_file
    save_file(out, os.path.join(qdir, "reference.safetensors"))
    os.remove(os.path.join(qdir, "dequant.safetensors"))


def main(only):
    unknown = set(only) - set(LAYER_VARIANTS) - set(MODEL_VARIANTS)
    if unknown:
        sys.exit(f"unknown variants: {sorted(unknown)}")
    wanted = lambda name: not only or name in only  # noqa: E731
    if not only:
        shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        random_layer_checkpoint(tmp)
        for name, args in LAYER_VARIANTS.items():
            if wanted(name):
                shutil.rmtree(os.path.join(OUT, name), ignore_errors=True)
                qz.main([tmp, os.path.join(OUT, name), "--keep", "kept_proj", "--ref"] + args)
    src = os.path.join(ROOT, "tests", "fixtures", "qwen3")
    for name, args in MODEL_VARIANTS.items():
        if wanted(name):
            shutil.rmtree(os.path.join(OUT, name), ignore_errors=True)
            qz.main([src, os.path.join(OUT, name), "--ref"] + args)
            model_reference(src, os.path.join(OUT, name))
    subprocess.run(["du", "-sh", OUT])


if __name__ == "__main__":
    main(sys.argv[1:])
