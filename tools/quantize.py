#!/usr/bin/env python3
"""Write a quantized copy of a BF16/F16/F32 Hugging Face checkpoint in one of the public formats.

    quantize.py SRC DST --format gptq|gptq_v2|autoround-gptq|autoround-awq|ct|fp8-block|fp8-channel
                [--group 128] [--asym] [--act-order] [--keep REGEX] [--ref]

Round-to-nearest quantization (the byte format matters here, not the algorithm); numpy only. Layouts follow the
public exporters (../shared/reference/models-and-formats.md §3):
  gptq / gptq_v2  GPTQModel: qweight i32 [K/8, N] packed along K, qzeros i32 [G, N/8] packed along N (v1 stores
                  zero - 1), scales f16 [G, N], g_idx i32 [K]; quantization_config as GPTQModel writes it.
  autoround-gptq  auto-round `auto_round:auto_gptq` packing: the GPTQ v1 bytes (auto-round's pack does zeros -= 1).
  autoround-awq   auto-round `auto_round:auto_awq`: AutoAWQ GEMM, qweight i32 [K, N/8] and qzeros i32 [G, N/8]
                  packed along N in AWQ_ORDER (0,2,4,6,1,3,5,7), raw zeros, scales f16 [G, N].
  ct              compressed-tensors pack-quantized W4A16: weight_packed i32 [N, K/8] along K with value + 8,
                  weight_scale bf16 [N, G], weight_shape i64 [2]; --asym (`symmetric: false`) adds
                  weight_zero_point i32 [N/8, G]: the signed zero point + 8 packed ALONG N (pack_to_int32(zp,
                  packed_dim=0) in compressed_tensors/compressors/pack_quantized).
  fp8-block       DeepSeek-V3 FP8: weight F8_E4M3 [N, K], weight_scale_inv f32 [N/128, K/128] (a multiplier).
  fp8-channel     compressed-tensors float-quantized, strategy channel: weight F8_E4M3, weight_scale f32 [N, 1].
Quantized: every 2-D `*_proj.weight` (except linear-attention in_proj_a/in_proj_b) whose shape fits the format;
`--keep` leaves matching modules in their float dtype and records them where the format's config does.
--ref also writes DST/dequant.safetensors: each quantized module's weight dequantized by an independent unpack of
the written tensors (f32), the reference the C++ reader is compared against bit for bit.
"""
import argparse
import json
import os
import re
import shutil
import struct

import numpy as np

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble i of a word holds logical column 8c + AWQ_ORDER[i] (AutoAWQ)
NP = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8,
      "BF16": np.uint16, "F8_E4M3": np.uint8, "F64": np.float64, "I8": np.int8, "I16": np.int16, "BOOL": np.uint8}


# ---- safetensors (own reader/writer: numpy has no bf16 / fp8) ----
def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=NP[info["dtype"]]).reshape(info["shape"])
        out[name] = (info["dtype"], arr)
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, numpy array with matching itemsize)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, arr = tensors[name]
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def to_f32(dt, arr):
    if dt == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


def f32_to_bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even (inputs are finite)
    return u.astype(np.uint16)


# ---- FP8 E4M3 (OCP: bias 7, no inf, 0x7f NaN, max 448) ----
def e4m3_table():
    c = np.arange(127)
    e, m = c >> 3, (c & 7).astype(np.float64)
    return np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7)).astype(np.float32)


E4M3 = e4m3_table()


def f32_to_e4m3(x):
    a = np.minimum(np.abs(x), 448.0).astype(np.float32)
    hi = np.clip(np.searchsorted(E4M3, a), 1, 126)
    lo = hi - 1
    dlo, dhi = a - E4M3[lo], E4M3[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))  # ties to even
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def e4m3_to_f32(b):
    mag = np.where((b & 0x7F) == 0x7F, np.nan, E4M3[np.minimum(b & 0x7F, 126)])
    return np.where(b & 0x80, -mag, mag).astype(np.float32)


# ---- INT4 round-to-nearest ----
def groups_of(W, group, act_order):
    K = W.shape[1]
    g = K if group == -1 else group
    if act_order:  # GPTQ act-order: columns by decreasing importance (here: sum of squares), groups consecutive
        perm = np.argsort(-(W.astype(np.float64) ** 2).sum(0), kind="stable")
        g_idx = np.empty(K, np.int32)
        g_idx[perm] = np.arange(K) // g
    else:
        g_idx = (np.arange(K) // g).astype(np.int32)
    return g_idx, (K + g - 1) // g


def quantize_int4(W, g_idx, G, sym, scale_dt, min_zero=0):
    """Returns q [N, K] (0..15), zeros [G, N] int, scales [G, N] f32 (already rounded to scale_dt)."""
    N, K = W.shape
    scales, zeros = np.zeros((G, N), np.float32), np.zeros((G, N), np.int64)
    for g in range(G):
        cols = W[:, g_idx == g]
        xmin, xmax = np.minimum(cols.min(1), 0), np.maximum(cols.max(1), 0)  # GPTQ keeps 0 in the range
        if sym:
            amax = np.maximum(-xmin, xmax)
            s, z = 2 * amax / 15, np.full(N, 8)
        else:
            s = (xmax - xmin) / 15
            z = None
        s = np.where(s == 0, 1.0, s).astype(np.float32)
        s = to_f32("BF16", f32_to_bf16(s)) if scale_dt == "BF16" else s.astype(np.float16).astype(np.float32)
        if z is None:
            # v1 cannot store zero 0 (it stores zero - 1): such writers keep zero >= 1.
            z = np.clip(np.round(-xmin / s), min_zero, 15).astype(np.int64)
        scales[g], zeros[g] = s, z
    q = np.clip(np.round(W / scales[g_idx].T) + zeros[g_idx].T, 0, 15).astype(np.uint32)
    return q, zeros, scales


def pack_rows(v):  # v [R*8, C] -> [R, C] i32, row 8r+j in bits 4j (packed along the first axis)
    v = v.astype(np.uint32).reshape(-1, 8, v.shape[1])
    return sum((v[:, j, :] & 0xF) << np.uint32(4 * j) for j in range(8)).astype(np.uint32).view(np.int32)


def pack_cols(v, order=range(8)):  # v [R, C*8] -> [R, C] i32, nibble i holds column 8c + order[i]
    v = v.astype(np.uint32).reshape(v.shape[0], -1, 8)
    return sum((v[:, :, o] & 0xF) << np.uint32(4 * i) for i, o in enumerate(order)).astype(np.uint32).view(np.int32)


def unpack_rows(p):  # inverse of pack_rows, independent of the writer's arithmetic
    u = p.view(np.uint32)
    return np.stack([(u >> np.uint32(4 * j)) & 0xF for j in range(8)], 1).reshape(-1, u.shape[1]).astype(np.int64)


def unpack_cols(p, order=range(8)):
    u = p.view(np.uint32)
    out = np.zeros((u.shape[0], u.shape[1] * 8), np.int64)
    for i, o in enumerate(order):
        out[:, o::8] = (u >> np.uint32(4 * i)) & 0xF
    return out


# ---- the formats ----
def write_module(fmt, prefix, W, a, out):
    """Quantizes W [N, K] f32 into `out`; returns its reference dequant (from the written tensors) or None."""
    N, K = W.shape
    if fmt in ("fp8-block", "fp8-channel"):
        if fmt == "fp8-block":
            bs = 128
            Wp = np.zeros((-(-N // bs) * bs, -(-K // bs) * bs), np.float32)
            Wp[:N, :K] = W
            amax = np.abs(Wp.reshape(Wp.shape[0] // bs, bs, -1, bs)).max((1, 3))
            s = np.where(amax == 0, 1, amax / 448).astype(np.float32)
            full = np.repeat(np.repeat(s, bs, 0), bs, 1)[:N, :K]
            out[prefix + ".weight"] = ("F8_E4M3", f32_to_e4m3(W / full))
            out[prefix + ".weight_scale_inv"] = ("F32", s)
            wq, sc = out[prefix + ".weight"][1], out[prefix + ".weight_scale_inv"][1]
            return e4m3_to_f32(wq) * np.repeat(np.repeat(sc, bs, 0), bs, 1)[:N, :K]
        amax = np.abs(W).max(1, keepdims=True)
        s = np.where(amax == 0, 1, amax / 448).astype(np.float32)
        out[prefix + ".weight"] = ("F8_E4M3", f32_to_e4m3(W / s))
        out[prefix + ".weight_scale"] = ("F32", s)
        return e4m3_to_f32(out[prefix + ".weight"][1]) * out[prefix + ".weight_scale"][1]

    g_idx, G = groups_of(W, a.group, a.act_order and fmt in ("gptq", "gptq_v2"))
    v1 = fmt in ("gptq", "autoround-gptq")
    q, z, s = quantize_int4(W, g_idx, G, not a.asym, "BF16" if fmt == "ct" else "F16", 1 if v1 else 0)
    if fmt == "ct":
        qp = np.zeros((N, -(-K // 8) * 8), np.uint32)
        qp[:, :K] = q  # q = signed + 8, the offset-binary value compressed-tensors stores
        out[prefix + ".weight_packed"] = ("I32", pack_cols(qp))
        out[prefix + ".weight_scale"] = ("BF16", f32_to_bf16(s.T.copy()))
        out[prefix + ".weight_shape"] = ("I64", np.array([N, K], np.int64))
        uq = unpack_cols(out[prefix + ".weight_packed"][1])[:, :K]
        us = to_f32("BF16", out[prefix + ".weight_scale"][1])
        if not a.asym:
            return (uq - 8).astype(np.float32) * us[:, g_idx]
        # z is the unsigned zero (signed zp + 8), exactly the offset-binary nibble; packed along N (rows padded).
        zp = np.zeros((G, -(-N // 8) * 8), np.uint32)
        zp[:, :N] = z
        out[prefix + ".weight_zero_point"] = ("I32", np.ascontiguousarray(pack_cols(zp).T))
        uz = unpack_cols(np.ascontiguousarray(out[prefix + ".weight_zero_point"][1].T))[:, :N].T  # [N, G]
        return ((uq - 8) - (uz[:, g_idx] - 8)).astype(np.float32) * us[:, g_idx]
    if fmt == "autoround-awq":
        out[prefix + ".qweight"] = ("I32", pack_cols(q.T, AWQ_ORDER))
        out[prefix + ".qzeros"] = ("I32", pack_cols(z, AWQ_ORDER))
        out[prefix + ".scales"] = ("F16", s.astype(np.float16))
        uq = unpack_cols(out[prefix + ".qweight"][1], AWQ_ORDER).T
        uz = unpack_cols(out[prefix + ".qzeros"][1], AWQ_ORDER)
    else:
        out[prefix + ".qweight"] = ("I32", pack_rows(q.T))
        out[prefix + ".qzeros"] = ("I32", pack_cols((z - 1) & 0xF if v1 else z))
        out[prefix + ".scales"] = ("F16", s.astype(np.float16))
        if fmt in ("gptq", "gptq_v2"):
            out[prefix + ".g_idx"] = ("I32", g_idx)
        uq = unpack_rows(out[prefix + ".qweight"][1]).T
        uz = unpack_cols(out[prefix + ".qzeros"][1]) + (1 if v1 else 0)
    us = out[prefix + ".scales"][1].astype(np.float32)
    return (uq - uz[g_idx].T).astype(np.float32) * us[g_idx].T


def fits(fmt, N, K, group):
    if fmt.startswith("fp8"):
        return True
    g = K if group == -1 else group
    if fmt == "ct":
        return K % g == 0
    return K % 8 == 0 and N % 8 == 0 and K % g == 0


def quant_config(fmt, a, kept):
    g = a.group
    if fmt in ("gptq", "gptq_v2"):
        return {"quant_method": "gptq", "bits": 4, "group_size": g, "desc_act": a.act_order, "sym": not a.asym,
                "checkpoint_format": fmt, "pack_dtype": "int32", "lm_head": False, "damp_percent": 0.01,
                "true_sequential": True, "static_groups": False,
                "dynamic": {"-:" + re.escape(k) + "$": {} for k in kept} or None,
                "meta": {"quantizer": ["grimoire-tools-quantize"], "uri": "tools/quantize.py"}}
    if fmt.startswith("autoround"):
        return {"quant_method": "auto-round", "bits": 4, "group_size": g, "sym": not a.asym, "data_type": "int",
                "packing_format": "auto_round:auto_gptq" if fmt == "autoround-gptq" else "auto_round:auto_awq",
                "iters": 0, "autoround_version": "0.7.0",
                "extra_config": {k: {"bits": 16, "data_type": "float"} for k in kept}}
    if fmt == "ct":
        return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "format": "pack-quantized",
                                              "weights": {"num_bits": 4, "type": "int", "symmetric": not a.asym,
                                                          "strategy": "group" if g != -1 else "channel",
                                                          "group_size": g if g != -1 else None,
                                                          "dynamic": False, "actorder": None, "observer": "minmax"},
                                              "input_activations": None, "output_activations": None}},
                "ignore": ["lm_head"] + kept, "kv_cache_scheme": None}
    if fmt == "fp8-block":
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"] + kept}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "format": "float-quantized",
                                          "weights": {"num_bits": 8, "type": "float", "symmetric": True,
                                                      "strategy": "channel", "dynamic": False, "observer": "minmax"},
                                          "input_activations": None, "output_activations": None}},
            "ignore": ["lm_head"] + kept}


FORMATS = ["gptq", "gptq_v2", "autoround-gptq", "autoround-awq", "ct", "fp8-block", "fp8-channel"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--format", required=True, choices=FORMATS)
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--asym", action="store_true")
    ap.add_argument("--act-order", action="store_true", help="GPTQ desc_act: permuted groups, g_idx written")
    ap.add_argument("--keep", default=None, help="regex of module names left unquantized")
    ap.add_argument("--ref", action="store_true", help="also write dequant.safetensors")
    a = ap.parse_args(argv)
    os.makedirs(a.dst, exist_ok=True)
    tensors = {}
    for fn in sorted(os.listdir(a.src)):
        if fn.endswith(".safetensors") and fn != "reference.safetensors":
            tensors.update(read_safetensors(os.path.join(a.src, fn)))
    out, ref, kept = {}, {}, []
    for name, (dt, arr) in tensors.items():
        prefix = name[: -len(".weight")]
        quantizable = (name.endswith("_proj.weight") and arr.ndim == 2 and dt in ("BF16", "F16", "F32")
                       and not re.search(r"in_proj_[ab]\.weight$", name))
        if quantizable and a.keep and re.search(a.keep, prefix):
            kept.append(prefix)
            quantizable = False
        if not quantizable or not fits(a.format, arr.shape[0], arr.shape[1], a.group):
            out[name] = (dt, arr)
            continue
        ref[prefix + ".weight"] = ("F32", write_module(a.format, prefix, to_f32(dt, arr), a, out))
    write_safetensors(os.path.join(a.dst, "model.safetensors"), out)
    with open(os.path.join(a.src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = quant_config(a.format, a, sorted(kept))
    with open(os.path.join(a.dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for extra in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(a.src, extra)):
            shutil.copy(os.path.join(a.src, extra), os.path.join(a.dst, extra))
    if a.ref:
        write_safetensors(os.path.join(a.dst, "dequant.safetensors"), ref)
    print(f"{a.format}: {len(ref)} modules quantized, {len(kept)} kept -> {a.dst}")


if __name__ == "__main__":
    main()
