"""Train the demo model's byte-level BPE tokenizer (8,192 ids) and write tokenizer.json + tokenizer_config.json.

Usage: python tools/train_demo/train_tokenizer.py [--out models/demo]

Pipeline as Qwen3.5 publishes it: NFC normalizer, the Qwen3.5 pre-tokenizer regex (Split, isolated) followed by
ByteLevel(add_prefix_space=false, use_regex=false), ByteLevel decoder. BPE is trained on a deterministic ~30 MB
sample of the training books (every 5th training book); held-out validation books are never seen. The 7 added
tokens take the last ids (8185..8191), after the 8,185 BPE ids, like Qwen's vocabularies.
"""
import argparse
import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

import corpus

VOCAB_SIZE = 8192
# (content, special) in id order; special as Qwen marks them.
ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
         ("<think>", False), ("</think>", False), ("<tool_call>", False), ("</tool_call>", False)]
# Qwen3.5's pre-tokenizer regex (Qwen2's plus \p{M} so combining marks stay inside words).
PRETOKENIZE_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                     r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SAMPLE_STRIDE = 5


def build_empty():
    tok = Tokenizer(BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                        fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def tokenizer_config(chat_template):
    decoder = {}
    for i, (content, special) in enumerate(ADDED):
        decoder[str(VOCAB_SIZE - len(ADDED) + i)] = {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(corpus.REPO, "models", "demo"))
    ap.add_argument("--corpus", default=corpus.DEFAULT_CORPUS)
    args = ap.parse_args()

    train_books, _ = corpus.split_books(corpus.read_corpus(args.corpus))
    sample = train_books[::SAMPLE_STRIDE]
    print(f"tokenizer sample: {len(sample)} books, {sum(map(len, sample)) / 1e6:.1f} MB")

    tok = build_empty()
    trainer = BpeTrainer(vocab_size=VOCAB_SIZE - len(ADDED), min_frequency=2, show_progress=False,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(sample, trainer=trainer, length=len(sample))
    assert tok.get_vocab_size() == VOCAB_SIZE - len(ADDED), tok.get_vocab_size()
    for content, special in ADDED:
        added = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([added])
        else:
            tok.add_tokens([added])
    assert tok.get_vocab_size() == VOCAB_SIZE
    assert tok.token_to_id("<|endoftext|>") == VOCAB_SIZE - len(ADDED)

    os.makedirs(args.out, exist_ok=True)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(corpus.HERE, "chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(template), f, indent=2, ensure_ascii=False)
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
