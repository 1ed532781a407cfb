#!/usr/bin/env python3
"""Writes tests/fixtures/gdn/gdn_recurrent.safetensors: inputs and outputs of transformers'
torch_recurrent_gated_delta_rule (Qwen3.5) for tests/unit/test_cpu_gdn.cpp.

Per case prefix (c0., c1.): q, k [T, Hk, dk]; v [T, Hv, dv]; a, b [T, Hv] (raw projections); A_log, dt_bias [Hv];
state0 [Hv, dk, dv] (the incoming state); out [T, Hv, dv]; state1 (the final state). g and beta are formed
exactly as Qwen3_5GatedDeltaNet.forward does. Run with /work/pyenv/bin/python; CI only reads the file."""
import pathlib

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers.models.qwen3_5.modeling_qwen3_5 import torch_recurrent_gated_delta_rule

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/gdn/gdn_recurrent.safetensors"

CASES = [  # T, Hk, Hv, dk, dv
    (7, 2, 4, 16, 8),
    (5, 1, 3, 12, 20),
]


def main():
    torch.manual_seed(20261130)
    tensors = {}
    for i, (T, Hk, Hv, dk, dv) in enumerate(CASES):
        q = torch.randn(T, Hk, dk)
        k = torch.randn(T, Hk, dk)
        v = torch.randn(T, Hv, dv)
        a = torch.randn(T, Hv)
        b = torch.randn(T, Hv)
        A_log = torch.log(torch.empty(Hv).uniform_(1, 16))
        dt_bias = torch.randn(Hv) * 0.5
        state0 = torch.randn(Hv, dk, dv) * 0.3
        beta = b.sigmoid()
        g = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
        out, state1 = torch_recurrent_gated_delta_rule(
            q[None], k[None], v[None], g=g[None], beta=beta[None], initial_state=state0[None].clone(),
            output_final_state=True, use_qk_l2norm_in_kernel=True)
        p = f"c{i}."
        for name, t in [("q", q), ("k", k), ("v", v), ("a", a), ("b", b), ("A_log", A_log), ("dt_bias", dt_bias),
                        ("state0", state0), ("out", out[0]), ("state1", state1[0])]:
            tensors[p + name] = t.to(torch.float32).contiguous()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT), metadata={"generator": "tools/make_gdn_fixture.py"})
    print(f"wrote {len(tensors)} tensors to {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
