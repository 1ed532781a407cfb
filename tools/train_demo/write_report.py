"""Write models/demo/TRAINING.md and loss_curve.png from a training run's log and the finalized model.

Usage: python tools/train_demo/write_report.py RUN_DIR [--model models/demo] [--data carry/train]

The three greedy continuations are made here by transformers on the CPU (fp32, the BF16 weights as stored) from
the opening of held-out paragraphs: validation books are never seen by the tokenizer or the model.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

PROMPT_WORDS = 40
NEW_TOKENS = 80
REPETITION_PENALTY = 1.3


def plot(log, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tok = [r["step"] for r in log]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(tok, [r["loss"] for r in log], label="train loss (next token)", lw=1)
    ax.plot(tok, [r["mtp_loss"] for r in log], label="train MTP loss (token after next)", lw=1)
    ev = [r for r in log if "val_loss" in r]
    ax.plot([r["step"] for r in ev], [r["val_loss"] for r in ev], "o-", label="held-out loss", ms=3)
    ax.plot([r["step"] for r in ev], [r["val_mtp_loss"] for r in ev], "s-", label="held-out MTP loss", ms=3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_ylim(2, 9.5)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def held_out_paragraphs(n=3):
    """The first prose paragraph of at least 400 characters past the middle of each of n validation books."""
    _, val_books = corpus.split_books(corpus.read_corpus())
    picks = []
    for book in val_books:
        paras = book.split("\n\n")
        for p in paras[len(paras) // 2:]:
            if len(p) >= 400 and "\n" not in p and p[:1].isupper():
                picks.append(p)
                break
        if len(picks) == n:
            break
    return picks


def continuations(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for para in held_out_paragraphs():
        prompt = " ".join(para.split()[:PROMPT_WORDS])
        ids = tok(prompt, return_tensors="pt").input_ids
        texts = []
        for penalty in (1.0, REPETITION_PENALTY):
            with torch.no_grad():
                gen = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                                     pad_token_id=tok.pad_token_id, repetition_penalty=penalty)
            texts.append(tok.decode(gen[0, ids.shape[1]:]))
        out.append((prompt, *texts))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--model", default=os.path.join(corpus.REPO, "models", "demo"))
    ap.add_argument("--data", default=os.path.join(corpus.REPO, "carry", "train"))
    ap.add_argument("--device-note", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    log = [json.loads(line) for line in open(os.path.join(args.run_dir, "train_log.jsonl"))]
    s = json.load(open(os.path.join(args.run_dir, "summary.json")))
    data = json.load(open(os.path.join(args.data, "data.json")))
    cfg = json.load(open(os.path.join(args.model, "config.json")))["text_config"]
    plot(log, os.path.join(args.model, "loss_curve.png"))
    conts = continuations(args.model)
    a = s["args"]
    size = sum(os.path.getsize(os.path.join(args.model, f)) for f in os.listdir(args.model))

    md = []
    w = md.append
    w("# Training record of the demo model\n")
    w("A small Qwen3.5-architecture model trained from scratch on public-domain books, shipped so that `grimoire "
      "serve` and `grimoire run` work out of the box. It writes 19th-century English prose; it is a base model "
      "(no chat or instruction tuning), so chat requests get a continuation, not an answer.\n")
    w("## Model\n")
    w(f"- `Qwen3_5ForConditionalGeneration` layout (`model_type: qwen3_5`, nested `text_config`, LM tensors under "
      f"`model.language_model.`, untied `lm_head.weight`, MTP head under `mtp.`), BF16, {s['params']:,} parameters "
      f"(MTP head included); folder size {size / 2**20:.1f} MiB.")
    w(f"- hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers "
      f"({', '.join('L' if t == 'linear_attention' else 'F' for t in cfg['layer_types'])}: Gated DeltaNet = L, "
      f"gated full attention = F), FFN {cfg['intermediate_size']} (SiLU-gated), vocab {cfg['vocab_size']}.")
    w(f"- Attention: {cfg['num_attention_heads']} query heads / {cfg['num_key_value_heads']} KV heads, head_dim "
      f"{cfg['head_dim']}, output gate (`attn_output_gate`), q/k (1+w) RMSNorm, partial RoPE "
      f"{cfg['partial_rotary_factor']} (first {int(cfg['head_dim'] * cfg['partial_rotary_factor'])} dims), "
      f"theta {cfg['rope_parameters']['rope_theta']:g}.")
    w(f"- Gated DeltaNet: {cfg['linear_num_key_heads']} key heads, {cfg['linear_num_value_heads']} value heads "
      f"({cfg['linear_num_value_heads'] // cfg['linear_num_key_heads']} value heads per key head), dims "
      f"{cfg['linear_key_head_dim']}/{cfg['linear_value_head_dim']}, conv kernel {cfg['linear_conv_kernel_dim']}.")
    w("- MTP head (`mtp_num_hidden_layers: 1`): `fc(concat(pre_fc_norm_embedding(embed(x[p+1])), "
      "pre_fc_norm_hidden(h[p])))`, one full-attention decoder layer, `mtp.norm`, shared `lm_head`; h is the main "
      "model's final hidden after `model.norm`. Trained jointly to predict x[p+2] "
      f"(loss weight {a['mtp_weight']}). Code: `tools/train_demo/demo_model.py`.\n")
    w("## Data\n")
    w(f"- Corpus `../shared/data/corpus/gutenberg-150M.txt.zst` (sha256 of the text {data['corpus_sha256']}), 433 "
      "books. Hard-wrapped lines are reflowed into one line per paragraph (indented lines keep their breaks), "
      "see `tools/train_demo/corpus.py`.")
    w(f"- Held out: every 40th book from index 20 ({data['val']['books']} books, {data['val']['tokens']:,} tokens); "
      f"training: {data['train']['books']} books, {data['train']['tokens']:,} tokens.")
    w(f"- Token streams (uint16, books joined by `<|endoftext|>`): train sha256 `{data['train']['sha256_u16']}`, "
      f"held-out sha256 `{data['val']['sha256_u16']}`; tokenizer.json sha256 `{data['tokenizer_sha256']}`.")
    w("- Tokenizer: byte-level BPE, 8,185 merges-vocabulary ids + 7 added tokens (ids 8185..8191: "
      "`<|endoftext|>`, `<|im_start|>`, `<|im_end|>` special; `<think>`, `</think>`, `<tool_call>`, `</tool_call>` "
      "not special), NFC, Qwen3.5 pre-tokenizer regex, trained on every 5th training book (~31 MB) by "
      "`tools/train_demo/train_tokenizer.py`. Chat template: `tools/train_demo/chat_template.jinja` (ChatML, "
      "Qwen3.5 XML tool calls; thinking off unless `enable_thinking=true`).\n")
    w("## Training\n")
    w(f"- {s['device_name']}, torch {s['torch']}, transformers {s['transformers']} (its Qwen3.5 modules, PyTorch "
      f"fallback kernels), bf16 autocast, fp32 master weights. {args.device_note}")
    w(f"- {s['steps_done']} steps of {a['batch']} x {a['seq']} tokens ({s['tokens_seen'] / 1e6:.0f}M tokens, "
      f"{s['tokens_seen'] / data['train']['tokens']:.1f} passes over the training stream), random windows from a "
      f"seeded generator; seed {a['seed']}. {s['train_seconds']:.0f} s of training, "
      f"{s['tokens_per_s'] / 1e3:.0f}K tokens/s.")
    w(f"- AdamW (betas 0.9/0.95, weight decay {a['weight_decay']} on matrices), peak LR {a['lr']}, linear warmup "
      f"{a['warmup']:.0%} of steps, cosine to {a['final_lr_frac']:.0%} of peak, gradient clip 1.0; loss = "
      f"next-token CE + {a['mtp_weight']} x MTP CE.")
    w(f"- Reproduce: `python tools/train_demo/prepare_data.py`, then on one H200 `python tools/train_demo/train.py "
      f"--data carry/train --out OUT --steps {a['steps']} --batch {a['batch']} --seq {a['seq']} --lr {a['lr']} "
      f"--seed {a['seed']}`, then `python tools/train_demo/finalize.py OUT` and "
      f"`python tools/train_demo/write_report.py OUT`.\n")
    w("## Results\n")
    w(f"Held-out evaluation: {s['val_eval_tokens']:,} tokens ({a['final_eval_windows']} windows of {a['seq']}).\n")
    w("| | cross-entropy (nats/token) | perplexity |")
    w("|---|---|---|")
    w(f"| unigram baseline (training-token frequencies, add-one) | {s['unigram_val_loss']:.3f} | "
      f"{s['unigram_val_ppl']:.1f} |")
    w(f"| demo model, next token | {s['final_val_loss']:.3f} | {s['final_val_ppl']:.2f} |")
    w(f"| demo model MTP head, token after next | {s['final_val_mtp_loss']:.3f} | "
      f"{__import__('math').exp(s['final_val_mtp_loss']):.2f} |\n")
    w(f"Perplexity is {s['unigram_val_ppl'] / s['final_val_ppl']:.0f}x lower than the unigram baseline. The MTP "
      f"head's greedy draft equals the main model's greedy next token at {s['final_val_mtp_agree']:.1%} of "
      "held-out positions (the one-token acceptance rate of greedy MTP speculation on this text).\n")
    w("![loss curve](loss_curve.png)\n")
    w("## Greedy continuations of held-out paragraphs\n")
    w(f"transformers on the CPU, fp32 compute on the stored BF16 weights, {NEW_TOKENS} new tokens; the prompt is the "
      f"first {PROMPT_WORDS} words of a paragraph from a held-out book. Plain greedy decoding of a model this small "
      f"falls into loops within a sentence or two, so each prompt also shows greedy decoding with "
      f"`repetition_penalty={REPETITION_PENALTY}` (still deterministic: the argmax of the penalized logits).\n")
    for i, (p, plain, penalized) in enumerate(conts, 1):
        w(f"{i}. **Prompt:** {p}\n")
        w(f"   **Greedy:** {plain}\n")
        w(f"   **Greedy, repetition_penalty {REPETITION_PENALTY}:** {penalized}\n")
    with open(os.path.join(args.model, "TRAINING.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
