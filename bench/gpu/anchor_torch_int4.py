"""Anchor for the INT4 kernels: torch._weight_int4pack_mm (tinygemm, BF16 activations, group 128) on the 27B
gate_up shape (5120 -> 34816), M = 1 and 16, timed the way bench_quant_kernels times ours (CUDA events, weights
rotated over > 400 MB so every call streams from HBM). Effective bandwidth counts the packed INT4 weight plus
the bf16 scale-and-zero table, the bytes the kernel must read.

    python3 bench/gpu/anchor_torch_int4.py --out anchor.json     (on the GPU machine; needs torch with CUDA)
"""
import argparse
import json

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dev = "cuda"
    N, K, G = 34816, 5120, 128
    metrics = {"torch_version": torch.__version__}
    copies = 5
    ws, szs = [], []
    for c in range(copies):
        q = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=dev)
        ws.append(torch._convert_weight_to_int4pack(q, 8))
        szs.append((torch.rand(K // G, N, 2, device=dev) * 0.01).to(torch.bfloat16))
    wbytes = N * K // 2 + (K // G) * N * 2 * 2
    times = {}
    for M in (1, 2, 4, 8, 16):
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        for i in range(3):
            torch._weight_int4pack_mm(x, ws[i % copies], G, szs[i % copies])
        reps = 50
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for i in range(reps):
            torch._weight_int4pack_mm(x, ws[i % copies], G, szs[i % copies])
        e1.record()
        torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / reps
        times[M] = ms
        metrics[f"torch_int4pack_M{M}_us_34816x5120"] = ms * 1e3
        print(f"torch._weight_int4pack_mm 34816x5120 M {M}: {ms * 1e3:.1f} us, {wbytes / (ms * 1e-3) / 1e9:.0f} GB/s")
    metrics["torch_int4pack_m1_GBps_34816x5120"] = wbytes / (times[1] * 1e-3) / 1e9
    metrics["torch_int4pack_m16_over_m1_34816x5120"] = times[16] / times[1]
    with open(args.out, "w") as f:
        json.dump({"metrics": metrics}, f, indent=2)


if __name__ == "__main__":
    main()
