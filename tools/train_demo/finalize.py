"""Turn a training run's output folder into models/demo/ and check it.

Usage: python tools/train_demo/finalize.py RUN_DIR [--out models/demo]

Joins model-0000N.safetensors into one BF16 model.safetensors (sorted tensor names), copies config.json and
generation_config.json, then checks (1) transformers here loads the folder with AutoModelForCausalLM and its
logits equal those of our DemoLM on the same weights, and (2) the fp32 logits recorded on the training machine
(check.safetensors, computed there by its transformers version) match ours: the same math on both versions.
"""
import argparse
import glob
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_model as dm  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--out", default=os.path.join(dm.__file__.rsplit("/tools/", 1)[0], "models", "demo"))
    args = ap.parse_args()
    torch.set_num_threads(1)

    sd = {}
    for part in sorted(glob.glob(os.path.join(args.run_dir, "model-*.safetensors"))):
        sd.update(load_file(part))
    assert all(v.dtype == torch.bfloat16 for v in sd.values())
    os.makedirs(args.out, exist_ok=True)
    save_file({k: sd[k] for k in sorted(sd)}, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    for name in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(args.run_dir, name), os.path.join(args.out, name))
    print(f"{len(sd)} tensors, {sum(v.numel() for v in sd.values()):,} params -> {args.out}")

    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.float32).eval()
    ours = dm.load_demo(args.out)
    check = load_file(os.path.join(args.run_dir, "check.safetensors"))
    ids = check["input_ids"]
    with torch.no_grad():
        hf_logits = hf(ids).logits
        h = ours.hidden(ids)
        our_logits = ours.lm.lm_head(h)
        our_mtp = ours.lm.lm_head(ours.mtp_hidden(ids, h))
    res = {
        "hf_vs_ours_max_abs": (hf_logits - our_logits).abs().max().item(),
        "device_vs_here_logits_max_abs": (check["logits"] - our_logits).abs().max().item(),
        "device_vs_here_mtp_max_abs": (check["mtp_logits"] - our_mtp).abs().max().item(),
        "logit_scale": our_logits.abs().max().item(),
    }
    print(json.dumps(res, indent=1))
    for k in ("hf_vs_ours_max_abs", "device_vs_here_logits_max_abs", "device_vs_here_mtp_max_abs"):
        if res[k] > 1e-3 * max(1.0, res["logit_scale"]):
            raise SystemExit(f"mismatch: {k} = {res[k]}")
    print("checks passed")


if __name__ == "__main__":
    main()
