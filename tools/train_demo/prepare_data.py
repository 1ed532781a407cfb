"""Tokenize the corpus for the demo-model training run.

Usage: python tools/train_demo/prepare_data.py [--out carry/train]

Writes train.u16.xz and val.u16.xz: uint16 token streams (each book's tokens followed by <|endoftext|>),
xz-compressed because the device run can carry at most 64 MiB, and data.json with their sha256 digests.
"""
import argparse
import hashlib
import json
import lzma
import os

import numpy as np
from tokenizers import Tokenizer

import corpus


def encode_books(tok, books):
    eot = tok.token_to_id(corpus.EOT)
    out = []
    for enc in tok.encode_batch(books, add_special_tokens=False):
        out.append(np.asarray(enc.ids, dtype=np.uint16))
        out.append(np.asarray([eot], dtype=np.uint16))
    return np.concatenate(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(corpus.REPO, "carry", "train"))
    ap.add_argument("--tokenizer", default=os.path.join(corpus.REPO, "models", "demo", "tokenizer.json"))
    ap.add_argument("--corpus", default=corpus.DEFAULT_CORPUS)
    args = ap.parse_args()

    tok = Tokenizer.from_file(args.tokenizer)
    train_books, val_books = corpus.split_books(corpus.read_corpus(args.corpus))
    os.makedirs(args.out, exist_ok=True)
    meta = {"corpus_sha256": corpus.CORPUS_SHA256, "tokenizer_sha256":
            hashlib.sha256(open(args.tokenizer, "rb").read()).hexdigest()}
    for name, books in (("val", val_books), ("train", train_books)):
        ids = encode_books(tok, books)
        raw = ids.tobytes()
        path = os.path.join(args.out, f"{name}.u16.xz")
        with open(path, "wb") as f:
            f.write(lzma.compress(raw, preset=6))
        meta[name] = {"books": len(books), "bytes": sum(len(b.encode("utf-8")) for b in books),
                      "tokens": int(ids.size), "sha256_u16": hashlib.sha256(raw).hexdigest(),
                      "xz_bytes": os.path.getsize(path)}
        print(name, meta[name])
    with open(os.path.join(args.out, "data.json"), "w") as f:
        json.dump(meta, f, indent=2)


if __name__ == "__main__":
    main()
