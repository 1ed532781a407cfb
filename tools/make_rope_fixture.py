#!/usr/bin/env python3
"""Writes tests/fixtures/rope/rope_cases.json: inv_freq and attention factor from transformers'
ROPE_INIT_FUNCTIONS for several config.json shapes (old rope_scaling / top-level rope_theta, and
transformers-5 rope_parameters), the expected values for tests/unit/test_config_rope.cpp.

Run with /work/pyenv/bin/python (needs torch + transformers); CI only reads the committed JSON."""
import json
import pathlib

import transformers
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/rope/rope_cases.json"

BASE = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16384}

CASES = [
    ("default_old", {"rope_theta": 10000.0, "head_dim": 64}, 64),
    ("default_v5_partial", {"head_dim": 256, "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                                                                  "partial_rotary_factor": 0.25}}, 256),
    ("linear_old", {"rope_theta": 500000.0, "head_dim": 128, "rope_scaling": {"type": "linear", "factor": 4.0}}, 128),
    ("llama3", {"head_dim": 128, "rope_scaling": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 8192}}, 128),
    ("yarn_qwen", {"head_dim": 128, "max_position_embeddings": 131072,
                   "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                       "original_max_position_embeddings": 32768}}, 128),
    ("yarn_mscale", {"head_dim": 64, "max_position_embeddings": 163840,
                     "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0,
                                         "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1,
                                         "original_max_position_embeddings": 4096}}, 64),
    ("yarn_attn_factor_notrunc", {"head_dim": 96, "rope_parameters": {
        "rope_type": "yarn", "rope_theta": 50000.0, "factor": 2.5, "attention_factor": 1.25, "beta_fast": 16,
        "beta_slow": 2, "truncate": False, "original_max_position_embeddings": 2048}}, 96),
]


def main():
    cases = []
    for name, extra, head_dim in CASES:
        cfg_json = dict(BASE, **extra)
        cfg = LlamaConfig(**cfg_json)
        rope_type = cfg.rope_parameters.get("rope_type", "default")
        if rope_type == "default":
            # Qwen3-Next's default honours partial_rotary_factor (Llama's ignores it).
            from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRotaryEmbedding
            inv_freq, attn = Qwen3NextRotaryEmbedding.compute_default_rope_parameters(cfg)
        else:
            inv_freq, attn = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu")
        cases.append({"name": name, "config": cfg_json, "head_dim": head_dim,
                      "inv_freq": [float(v) for v in inv_freq.tolist()], "attention_factor": float(attn)})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"transformers": transformers.__version__, "cases": cases}, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
