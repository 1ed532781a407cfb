#!/usr/bin/env python3
"""Makes tests/fixtures/tokenizer/: reference token ids from the Hugging Face `tokenizers` library (0.23.3).

    /work/pyenv/bin/python tools/make_tokenizer_fixtures.py [../shared]

Writes
  stories260k/tokenizer.json, tokenizer_config.json  the Llama-2 style SentencePiece BPE (byte fallback) that
      tools/convert_llama2c.py makes from ../shared/data/models/stories260K/tok512.bin
  hf_reference.json  for windows of the decompressed corpus (../shared/data/corpus/gutenberg-150M.txt.zst, byte
      offset + length, inside its first 200 KB) and for a few hand-picked strings: the ids `tokenizers` gives with
      the Qwen3 files (vocab.json + merges.txt + tokenizer_config.json, loaded through transformers'
      AutoTokenizer, i.e. the fast tokenizer HF itself builds from them) and with the stories260k tokenizer.json,
      plus their decoded text. No special tokens are added (no BOS), special tokens in the text are parsed.
CI does not run this: the outputs are committed.
"""
import json
import os
import subprocess
import sys

import tokenizers
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import convert_llama2c  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "tokenizer")
SAMPLE_BYTES = 200 * 1024
WINDOWS = [(0, 4096), (40_000, 4096), (90_000, 4096), (150_000, 4096)]

EXTRA = [
    "Hello world",
    " leading space and  two  spaces, trailing space ",
    "line one\nline two\n\n\nthree newlines\r\nand CRLF\ttab",
    "emoji 🦙🚀 and CJK 我想在apple工作 and Khmer ស្វាគមន៍",
    "numbers 1234567 3.14159 and 'quotes' I'll WE'RE don't",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nHello!<|im_end|>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<s>Once upon a time</s> there was <unk> a cat.",
    "Combining: cafe\u0301 vs café, Å vs A\u030a",
    "    indented code:\n        return x  # comment",
]


def corpus_sample(shared):
    path = os.path.join(shared, "data", "corpus", "gutenberg-150M.txt.zst")
    raw = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE, check=False).stdout[:SAMPLE_BYTES]
    return raw


def windows(sample):
    out = []
    for off, n in WINDOWS:
        # Cut at line starts/ends so the window is valid UTF-8 and natural text.
        b = sample.index(b"\n", off) + 1 if off else 0
        e = sample.rindex(b"\n", b, b + n) + 1
        out.append((b, e - b, sample[b:e].decode("utf-8")))
    return out


def main(argv):
    shared = argv[1] if len(argv) > 1 else os.path.join(HERE, "..", "..", "shared")
    sp_dir = os.path.join(OUT, "stories260k")
    os.makedirs(sp_dir, exist_ok=True)
    pieces = convert_llama2c.read_tokenizer(
        os.path.join(shared, "data", "models", "stories260K", "tok512.bin"), 512)
    convert_llama2c.write_tokenizer(pieces, sp_dir)

    qwen = transformers.AutoTokenizer.from_pretrained(os.path.join(shared, "data", "tokenizers", "qwen3"))
    tokenizers_by_name = {
        "qwen3": qwen.backend_tokenizer,
        "stories260k": tokenizers.Tokenizer.from_file(os.path.join(sp_dir, "tokenizer.json")),
    }

    def ref(text):
        r = {}
        for name, tok in tokenizers_by_name.items():
            ids = tok.encode(text, add_special_tokens=False).ids
            r[name] = {"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)}
        return r

    sample = corpus_sample(shared)
    doc = {
        "made_by": "tools/make_tokenizer_fixtures.py",
        "tokenizers_version": tokenizers.__version__,
        "transformers_version": transformers.__version__,
        "corpus": "data/corpus/gutenberg-150M.txt.zst",
        "windows": [dict(offset=b, length=n, **ref(text)) for b, n, text in windows(sample)],
        "strings": [dict(text=t, **ref(t)) for t in EXTRA],
    }
    with open(os.path.join(OUT, "hf_reference.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main(sys.argv)
