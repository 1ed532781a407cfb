#!/usr/bin/env python3
"""Regenerates tests/fixtures/quant_ref/: small layers packed by the REFERENCE library itself (not by
tools/quantize.py), so test_quant_reference checks our readers against the exporters' own bytes and their own
dequantization. CI has no torch: the outputs are committed.

Reference packers (pinned; installed beside the project's python, not into it):
    /work/pyenv/bin/python -m pip install --no-deps --target build/refpack -r tools/refpack-requirements.txt
    PYTHONPATH=build/refpack /work/pyenv/bin/python tools/make_reference_pack_fixtures.py

compressed-tensors (pack-quantized W4A16, sym and asym): the library's own qparams (calculate_qparams over each
group's min/max), PackedQuantizationCompressor.compress for the bytes, and its decompress for the reference
dequant, twice: with the stored bf16 scales (its native output, bf16) and with the same scales widened to f32
(the exact product (q - z) * scale, which is what our reader keeps). It also asserts that tools/quantize.py
packs the library's integers into the library's bytes (weight_packed along K, weight_zero_point along N).

auto-round (auto_round:auto_gptq and auto_round:auto_awq, sym and asym, g64 / g128): its own packers
(auto_round_extension.torch.qlinear_torch_zp.QuantLinear.pack, export_to_awq WQLinear_GEMM.from_linear) over
min/max RTN scales and zeros, and its own fp16 dequant (that QuantLinear's forward on an identity input,
export_to_awq.utils.dequantize_gemm).

Each variant directory holds model.safetensors (layer.proj.*, exactly the library's tensors), config.json (the
library's quantization_config) and reference.safetensors: `weight` (the bf16 layer it started from) and the
library's dequant: `dequant_f32` + `dequant_bf16` (compressed-tensors) or `dequant_f16` (auto-round).
gptqmodel is not used: see tools/refpack-requirements.txt.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import save_file

import auto_round
import compressed_tensors
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
from compressed_tensors.quantization.utils import calculate_qparams

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "quant_ref")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import quantize as qz  # noqa: E402

PINNED = {"compressed_tensors": "0.20.1", "auto_round": "0.16.1"}

# name -> (N, K, symmetric, strategy, group_size). N = 44 is not a multiple of 8 (the zero point is packed along
# N, so its last word is partial); K = 196 is not a multiple of 8 (the last weight word is partial).
CT_VARIANTS = {
    "ct_sym_g128": (44, 256, True, "group", 128),
    "ct_asym_g128": (44, 256, False, "group", 128),
    "ct_asym_g64": (44, 256, False, "group", 64),
    "ct_asym_chan": (44, 196, False, "channel", None),
}


def ct_layer(name, N, K, sym, strategy, group):
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    # A few large columns so some groups are lopsided (zero points away from the middle).
    w = torch.randn(N, K, generator=g) * 0.05
    w[:, :: 17] += 0.1
    w = w.to(torch.bfloat16)
    args = QuantizationArgs(num_bits=4, type="int", symmetric=sym, strategy=strategy, group_size=group)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    gs = K if strategy == "channel" else group
    wg = w.reshape(N, K // gs, gs) if K % gs == 0 else w.reshape(N, 1, K)
    scale, zp = calculate_qparams(wg.amin(-1), wg.amax(-1), args)  # [N, G] bf16, [N, G] int8
    sd = {"weight": w, "weight_scale": scale, "weight_zero_point": zp}
    packed = PackedQuantizationCompressor.compress(sd, scheme)
    native = PackedQuantizationCompressor.decompress(packed, scheme)["weight"]
    wide = dict(packed, weight_scale=packed["weight_scale"].float())
    exact = PackedQuantizationCompressor.decompress(wide, scheme)["weight"]
    assert native.dtype == torch.bfloat16 and exact.dtype == torch.float32
    check_our_packer(packed, N, K)
    cfg = QuantizationConfig(config_groups={"group_0": scheme}, format="pack-quantized",
                             quantization_status="compressed").to_dict()
    return packed, cfg, {"weight": w, "dequant_f32": exact, "dequant_bf16": native}


# name -> (packing_format, N, K, sym, group_size). auto-round's packers need N a multiple of 32 (qzeros words = N // 32 * bits).
AR_VARIANTS = {
    "ar_gptq_asym_g128": ("auto_round:auto_gptq", 64, 256, False, 128),
    "ar_gptq_sym_g64": ("auto_round:auto_gptq", 64, 256, True, 64),
    "ar_awq_asym_g64": ("auto_round:auto_awq", 64, 256, False, 64),
    "ar_awq_sym_g128": ("auto_round:auto_awq", 64, 256, True, 128),
}


def ar_layer(name, fmt, N, K, sym, group):
    """auto-round's own packers: the auto_round:auto_gptq QuantLinear (qlinear_torch_zp, zeros stored - 1) and
    the auto_round:auto_awq WQLinear_GEMM; their own dequant (the QuantLinear forward on an identity input,
    dequantize_gemm) is fp16."""
    from auto_round.export.export_to_awq.utils import WQLinear_GEMM, dequantize_gemm
    from auto_round_extension.torch.qlinear_torch_zp import QuantLinear

    g = torch.Generator().manual_seed(sum(map(ord, name)))
    w = torch.randn(N, K, generator=g) * 0.05
    w[:, ::17] += 0.1
    w = w.to(torch.bfloat16)
    lin = torch.nn.Linear(K, N, bias=False)
    lin.weight.data = w.float()
    wg = w.float().reshape(N, K // group, group)
    lo, hi = wg.amin(-1).clamp(max=0), wg.amax(-1).clamp(min=0)
    if sym:  # auto-round's sym int4: scale = max|w| / 8 around zero point 8
        scale = torch.maximum(-lo, hi) / 8
        zp = torch.full_like(scale, 8)
    else:
        scale = (hi - lo) / 15
        zp = torch.round(-lo / scale).clamp(0, 15)
    scale = scale.half().float()  # [N, G]
    if fmt == "auto_round:auto_gptq":
        q = QuantLinear(4, group, K, N, bias=False)
        q.pack(lin, scale, zp.to(torch.int32))
        t = {"qweight": q.qweight, "qzeros": q.qzeros, "scales": q.scales}
        native = q(torch.eye(K)).t()  # [N, K]: each output is one product, exact in the fp32 matmul
    else:
        q = WQLinear_GEMM.from_linear(lin, 4, group, scales=scale.t().contiguous(),
                                      zeros=8 if sym else zp.t().contiguous())
        t = {"qweight": q.qweight, "qzeros": q.qzeros, "scales": q.scales}
        native = dequantize_gemm(q.qweight, q.qzeros, q.scales, 4, group).t()  # [N, K] fp16
    native = native.half()
    cfg = {"quant_method": "auto-round", "bits": 4, "group_size": group, "sym": sym, "data_type": "int",
           "packing_format": fmt}
    return t, cfg, {"weight": w, "dequant_f16": native.contiguous()}


def check_our_packer(packed, N, K):
    """tools/quantize.py's packing of the library's own integers gives the library's bytes."""
    q = unpack_from_int32(packed["weight_packed"], 4, torch.Size([N, K])).numpy().astype(np.int64) + 8
    qp = np.zeros((N, -(-K // 8) * 8), np.uint32)
    qp[:, :K] = q
    assert np.array_equal(qz.pack_cols(qp), packed["weight_packed"].numpy()), "weight_packed differs"
    if "weight_zero_point" in packed:
        G = packed["weight_scale"].shape[1]
        z = unpack_from_int32(packed["weight_zero_point"], 4, torch.Size([N, G]), packed_dim=0).numpy() + 8
        zp = np.zeros((G, -(-N // 8) * 8), np.uint32)
        zp[:, :N] = z.T
        assert np.array_equal(qz.pack_cols(zp).T, packed["weight_zero_point"].numpy()), "weight_zero_point differs"


def main():
    for mod, want in PINNED.items():
        have = sys.modules[mod].__version__
        if have != want:
            sys.exit(f"{mod} {have} installed; the fixtures are pinned to {want}")
    shutil.rmtree(OUT, ignore_errors=True)
    for name, spec in CT_VARIANTS.items():
        d = os.path.join(OUT, name)
        os.makedirs(d)
        packed, qcfg, ref = ct_layer(name, *spec)
        save_file({"layer.proj." + k: v.contiguous() for k, v in packed.items()}, os.path.join(d, "model.safetensors"))
        save_file({k: v.contiguous() for k, v in ref.items()}, os.path.join(d, "reference.safetensors"))
        cfg = {"model_type": "grimoire_quant_layer_test", "quantization_config": qcfg,
               "_reference": f"compressed-tensors {compressed_tensors.__version__}"}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, default=str)
        print(name, {k: (str(v.dtype), list(v.shape)) for k, v in packed.items()})
    for name, spec in AR_VARIANTS.items():
        d = os.path.join(OUT, name)
        os.makedirs(d)
        packed, qcfg, ref = ar_layer(name, *spec)
        save_file({"layer.proj." + k: v.contiguous() for k, v in packed.items()}, os.path.join(d, "model.safetensors"))
        save_file(ref, os.path.join(d, "reference.safetensors"))
        cfg = {"model_type": "grimoire_quant_layer_test", "quantization_config": qcfg,
               "_reference": f"auto-round {auto_round.__version__}"}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        print(name, {k: (str(v.dtype), list(v.shape)) for k, v in packed.items()})


if __name__ == "__main__":
    main()
