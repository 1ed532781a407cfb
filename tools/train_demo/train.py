"""Train the demo Qwen3.5 model (main LM + MTP head) on the tokenized corpus and export it.

Usage (the recorded run, on one H200):
  python tools/train_demo/train.py --data carry/train --out $OUT --steps 1900 --batch 64 --seq 1024
Quick CPU check:
  python tools/train_demo/train.py --data carry/train --out /tmp/demo --steps 3 --batch 2 --seq 64 --device cpu

Inputs: train.u16.xz / val.u16.xz from prepare_data.py. Outputs in --out: model-0000N.safetensors (BF16,
published naming, split in parts of at most --part-mb so each file can come back from the device; join_parts.py
joins them), config.json, generation_config.json, train_log.jsonl, summary.json, check.safetensors (fp32 logits
of the exported BF16 weights on fixed inputs, to check that another transformers version computes the same).

Deterministic given --seed: initialization and the order of training windows come from seeded generators.
"""
import argparse
import hashlib
import json
import lzma
import math
import os
import sys
import time

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_model as dm  # noqa: E402


def load_tokens(path):
    raw = lzma.decompress(open(path, "rb").read())
    return np.frombuffer(raw, dtype=np.uint16), hashlib.sha256(raw).hexdigest()


def val_windows(val, n, seq):
    """n evenly spaced windows of seq+1 tokens from the held-out stream: [n, seq+1] int64."""
    starts = np.linspace(0, len(val) - seq - 2, n).astype(np.int64)
    return torch.from_numpy(np.stack([val[s:s + seq + 1].astype(np.int64) for s in starts]))


@torch.no_grad()
def evaluate(model, windows, batch, device, autocast):
    """Mean main/MTP loss over windows, and the MTP greedy agreement with the main model's next argmax."""
    model.eval()
    tot_main = tot_mtp = agree = count_mtp = 0.0
    for i in range(0, windows.shape[0], batch):
        seq = windows[i:i + batch].to(device)
        with autocast():
            main, mtp, logits, mlogits = model.losses(seq)
        n_main, n_mtp = seq.shape[0] * (seq.shape[1] - 1), seq.shape[0] * (seq.shape[1] - 2)
        tot_main += main.item() * n_main
        tot_mtp += mtp.item() * n_mtp
        # The MTP draft at p is accepted by greedy verification when it equals the main model's argmax at p+1.
        agree += (mlogits.argmax(-1) == logits[:, 1:].argmax(-1)).sum().item()
        count_mtp += n_mtp
    model.train()
    n_main_all = windows.shape[0] * (windows.shape[1] - 1)
    return tot_main / n_main_all, tot_mtp / count_mtp, agree / count_mtp


def unigram_loss(train, windows):
    """Cross-entropy (nats) of the add-one-smoothed training unigram distribution on the validation targets."""
    counts = np.bincount(train, minlength=dm.VOCAB).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[windows[:, 1:].numpy()].mean())


def lr_at(step, args):
    warm = max(1, int(args.warmup * args.steps))
    if step < warm:
        return args.lr * (step + 1) / warm
    frac = (step - warm) / max(1, args.steps - warm)
    return args.lr * (args.final_lr_frac + (1 - args.final_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def export(model, cfg, out, part_mb):
    sd = dm.export_state_dict(model)
    parts, cur, size = [], {}, 0
    for k in sorted(sd):
        nbytes = sd[k].numel() * sd[k].element_size()
        if cur and size + nbytes > part_mb * 2**20:
            parts.append(cur)
            cur, size = {}, 0
        cur[k] = sd[k]
        size += nbytes
    parts.append(cur)
    for i, p in enumerate(parts):
        save_file(p, os.path.join(out, f"model-{i + 1:05d}.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(dm.published_config(cfg), f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(dm.GENERATION_CONFIG, f, indent=2)
    return sd


@torch.no_grad()
def write_check(sd, cfg, val, out):
    """fp32 logits of the exported BF16 weights (main and MTP) on two fixed held-out windows."""
    ref = dm.DemoLM(cfg)
    lm_sd = {("model." + k[len("model.language_model."):] if k.startswith("model.language_model.") else k): v
             for k, v in sd.items() if not k.startswith("mtp.")}
    ref.lm.load_state_dict(lm_sd)
    ref.mtp.load_state_dict({k[4:]: v for k, v in sd.items() if k.startswith("mtp.")})
    ref = ref.float().eval()
    ids = val_windows(val, 2, 48)[:, :48]
    h = ref.hidden(ids)
    logits = ref.lm.lm_head(h)
    mlogits = ref.lm.lm_head(ref.mtp_hidden(ids, h))
    save_file({"input_ids": ids.contiguous(), "logits": logits.contiguous(), "mtp_logits": mlogits.contiguous()},
              os.path.join(out, "check.safetensors"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--final-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=float, default=0.05, help="fraction of steps")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--final-eval-windows", type=int, default=512)
    ap.add_argument("--time-limit", type=float, default=1e9, help="seconds of training before stopping early")
    ap.add_argument("--part-mb", type=float, default=15.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)   # the CPU check runs on a shared machine: oversubscription is far slower
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    train, train_sha = load_tokens(os.path.join(args.data, "train.u16.xz"))
    val, val_sha = load_tokens(os.path.join(args.data, "val.u16.xz"))
    print(f"train tokens {len(train):,} sha256 {train_sha}\nval tokens {len(val):,} sha256 {val_sha}", flush=True)
    train_gpu = torch.from_numpy(train.astype(np.int32)).to(device)
    eval_w = val_windows(val, args.eval_windows, args.seq)
    final_w = val_windows(val, args.final_eval_windows, args.seq)

    torch.manual_seed(args.seed)
    cfg = dm.text_config()
    model = dm.DemoLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params:,} (mtp {sum(p.numel() for p in model.mtp.parameters()):,})", flush=True)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    if device.type == "cuda":
        def autocast():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    else:
        def autocast():
            return torch.autocast("cpu", dtype=torch.bfloat16, enabled=False)

    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    offs_range = len(train) - args.seq - 1
    ar = torch.arange(args.seq + 1, device=device)
    log = open(os.path.join(args.out, "train_log.jsonl"), "w")
    tokens_per_step = args.batch * args.seq
    t_train = time.time()
    step = 0
    stopped_early = False
    for step in range(args.steps):
        t0 = time.time()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        starts = torch.randint(0, offs_range, (args.batch,), generator=gen).to(device)
        seq = train_gpu[starts[:, None] + ar[None, :]].long()
        with autocast():
            main, mtp, _, _ = model.losses(seq)
            loss = main + args.mtp_weight * mtp
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 10 == 0 or step == args.steps - 1:
            rec = {"step": step, "loss": main.item(), "mtp_loss": mtp.item(), "lr": opt.param_groups[0]["lr"],
                   "grad_norm": gnorm.item(), "elapsed_s": time.time() - t_train}
            if step % args.eval_every == 0 or step == args.steps - 1:
                vl, vm, acc = evaluate(model, eval_w, 32, device, autocast)
                rec.update(val_loss=vl, val_mtp_loss=vm, val_mtp_agree=acc)
            rec["tokens_per_s"] = tokens_per_step * (step + 1) / (time.time() - t_train)
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
        if time.time() - t_start > args.time_limit:
            stopped_early = True
            print(f"time limit reached at step {step}", flush=True)
            break
    train_s = time.time() - t_train

    vl, vm, acc = evaluate(model, final_w, 32, device, autocast)
    uni = unigram_loss(train, final_w)
    summary = {
        "steps_done": step + 1, "steps_planned": args.steps, "stopped_early": stopped_early,
        "train_seconds": train_s, "tokens_seen": tokens_per_step * (step + 1),
        "tokens_per_s": tokens_per_step * (step + 1) / train_s, "params": n_params,
        "final_val_loss": vl, "final_val_ppl": math.exp(vl), "final_val_mtp_loss": vm,
        "final_val_mtp_agree": acc, "unigram_val_loss": uni, "unigram_val_ppl": math.exp(uni),
        "val_eval_tokens": int(final_w.shape[0] * args.seq), "train_tokens": int(len(train)),
        "val_tokens": int(len(val)), "train_sha256_u16": train_sha, "val_sha256_u16": val_sha,
        "args": vars(args), "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "device_name": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
    }
    print(json.dumps(summary, indent=1), flush=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    sd = export(model, cfg, args.out, args.part_mb)
    write_check(sd, cfg, val, args.out)
    print(f"exported in {time.time() - t_start:.1f}s total", flush=True)


if __name__ == "__main__":
    main()
