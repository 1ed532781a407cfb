"""Reference logits of the trained demo model (models/demo) for tests/unit/test_demo_model.cpp.

Usage: /work/pyenv/bin/python tools/train_demo/make_demo_fixture.py [--model models/demo]
Writes tests/fixtures/demo/reference.safetensors (committed: CI has no torch).

transformers (fp32 compute on the stored BF16 weights, CPU) runs three prompts whose text is stored in the
metadata so the test can also check grimoire's tokenizer:
  prompt_0  a short sentence (every logit row)
  prompt_1  a ChatML conversation rendered by the model's chat template (special tokens; last 4 rows)
  prompt_2  a 150-token held-out paragraph (rows around the 64-token DeltaNet chunk edges and the last)
Tensors (the layout of tests/unit/test_models_util.h's Reference): prompt_i / positions_i int32, logits_i f32
[P, vocab]; greedy int32: 24 greedy tokens after prompt_0 from HF generate (cached, recurrent decode path);
mtp_positions / mtp_logits: the MTP head's logits on prompt_2 (hidden = main post-norm hidden at p, token p+1).
Metadata: text_i, greedy_min_margin (smallest top-1/top-2 gap along the greedy run).
"""
import argparse
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import demo_model as dm  # noqa: E402

SENTENCE = "It was a bright cold day in April, and the clocks were striking"
CHAT = [{"role": "system", "content": "You are a storyteller."},
        {"role": "user", "content": "Tell me about the old house by the river."}]
GREEDY_TOKENS = 24


def held_out_text(n_tokens, tok):
    """The first paragraph of >= n_tokens tokens in the last held-out book, cut to n_tokens."""
    _, val = corpus.split_books(corpus.read_corpus())
    for para in val[-1].split("\n\n"):
        ids = tok(para).input_ids
        if len(ids) >= n_tokens and para[:1].isupper():
            return tok.decode(ids[:n_tokens])
    raise RuntimeError("no long paragraph found")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(corpus.REPO, "models", "demo"))
    ap.add_argument("--out", default=os.path.join(corpus.REPO, "tests", "fixtures", "demo"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.model)
    hf = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    ours = dm.load_demo(args.model)

    texts = [SENTENCE, tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True),
             held_out_text(150, tok)]
    tensors, meta = {}, {}
    for i, text in enumerate(texts):
        ids = tok(text, return_tensors="pt").input_ids
        n = ids.shape[1]
        assert tok.decode(ids[0]) == text
        rows = {0: list(range(n)), 1: list(range(n - 4, n)),
                2: [0, 1, 62, 63, 64, 65, 127, 128, n - 1]}[i]
        with torch.no_grad():
            logits = hf(ids).logits[0]
        tensors[f"prompt_{i}"] = ids[0].to(torch.int32)
        tensors[f"positions_{i}"] = torch.tensor(rows, dtype=torch.int32)
        tensors[f"logits_{i}"] = logits[rows].contiguous()
        meta[f"text_{i}"] = text
        if i == 2:
            with torch.no_grad():
                h = ours.hidden(ids)
                ours_logits = ours.lm.lm_head(h)[0]
                mtp = ours.lm.lm_head(ours.mtp_hidden(ids, h))[0]
            assert (ours_logits - logits).abs().max() < 1e-4
            mrows = [0, 1, 63, 64, 100, n - 2]
            tensors["mtp_positions"] = torch.tensor(mrows, dtype=torch.int32)
            tensors["mtp_logits"] = mtp[mrows].contiguous()

    ids = tensors["prompt_0"].long()[None]
    with torch.no_grad():
        gen = hf.generate(ids, max_new_tokens=GREEDY_TOKENS, do_sample=False, eos_token_id=None,
                          pad_token_id=dm.EOT_ID, output_scores=True, return_dict_in_generate=True)
    tensors["greedy"] = gen.sequences[0, ids.shape[1]:].to(torch.int32)
    margin = min((s[0].topk(2).values[0] - s[0].topk(2).values[1]).item() for s in gen.scores)
    meta["greedy_min_margin"] = f"{margin:.6f}"
    meta["greedy_text"] = tok.decode(tensors["greedy"])

    os.makedirs(args.out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(args.out, "reference.safetensors"),
              metadata=meta)
    for k, v in meta.items():
        print(k, repr(v[:200]))


if __name__ == "__main__":
    main()
