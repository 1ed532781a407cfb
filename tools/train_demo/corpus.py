"""Corpus reading, cleaning and the train/validation split shared by every demo-model script.

The corpus is ../shared/data/corpus/gutenberg-150M.txt.zst: 433 public-domain books separated by
"\n\n<|endoftext|>\n\n". Books are hard-wrapped at ~72 columns; we reflow paragraphs into single lines so the
model learns prose the way users type prompts (no newline every 12 words). Indented lines (verse, tables,
tables of contents) keep their line breaks.
"""
import hashlib
import os
import re
import subprocess

BOOK_SEP = "\n\n<|endoftext|>\n\n"
EOT = "<|endoftext|>"
CORPUS_SHA256 = "636eb0a310b11135b77f205d2244a4eca11e3db3325a18a3a1157cbfd338b6ab"
# Held-out books: every 40th book starting at index 20 (11 of 433), never seen by tokenizer or model training.
VAL_START, VAL_STRIDE = 20, 40

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CORPUS = os.path.join(REPO, "..", "shared", "data", "corpus", "gutenberg-150M.txt.zst")

_BLANK_RUN = re.compile(r"\n[ \t]*\n\s*")


def read_corpus(path=DEFAULT_CORPUS):
    """Return the uncompressed corpus text, checking its published sha256."""
    raw = subprocess.run(["zstd", "-d", "-c", "-q", path], check=True, capture_output=True).stdout
    digest = hashlib.sha256(raw).hexdigest()
    if digest != CORPUS_SHA256:
        raise RuntimeError(f"{path}: sha256 {digest} != expected {CORPUS_SHA256}")
    return raw.decode("utf-8")


def reflow(book):
    """Join hard-wrapped lines of each paragraph with spaces; paragraphs separated by one blank line."""
    book = book.replace("\r\n", "\n").replace("\r", "\n")
    out = []
    for para in _BLANK_RUN.split(book.strip("\n")):
        lines = [ln.rstrip() for ln in para.split("\n")]
        lines = [ln for ln in lines if ln]
        if not lines:
            continue
        joined = lines[0].strip()
        for ln in lines[1:]:
            # An indented line starts a new visual line (verse, lists, tables): keep the break.
            if ln[:1] in (" ", "\t"):
                joined += "\n" + ln.strip()
            else:
                joined += " " + ln.strip()
        out.append(joined)
    return "\n\n".join(out)


def split_books(text):
    """Return (train_books, val_books) of reflowed book texts."""
    books = text.split(BOOK_SEP)
    train, val = [], []
    for i, b in enumerate(books):
        (val if i % VAL_STRIDE == VAL_START % VAL_STRIDE and i >= VAL_START else train).append(reflow(b))
    return train, val
