#!/usr/bin/env python3
"""Converts a llama2.c checkpoint (+ its tokenizer .bin) into a Hugging Face Llama checkpoint directory:
config.json, generation_config.json, model.safetensors (F32), tokenizer.json (Llama-2 style SentencePiece BPE
with byte fallback) and tokenizer_config.json.

Standard library only (CI runs it without numpy or torch):
  python3 tools/convert_llama2c.py MODEL.bin TOKENIZER.bin OUT_DIR

llama2.c layout (run.c): a header of 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
seq_len; a negative vocab_size means the classifier is NOT shared with the embedding), then fp32 arrays:
token_embedding [V, D], rms_att [L, D], wq [L, D, D], wk [L, KV, D], wv [L, KV, D], wo [L, D, D],
rms_ffn [L, D], w1 [L, F, D], w2 [L, D, F], w3 [L, F, D], rms_final [D], two RoPE tables [seq, hs/2] (skipped),
then wcls [V, D] when not shared. Matrices are nn.Linear weights ([out, in]), the same as Hugging Face.

RoPE: llama2.c rotates interleaved pairs (2i, 2i+1) of each head; Hugging Face Llama rotates (i, i + hs/2).
Permuting the rows of wq and wk inside each head (new row i <- old 2i, new row hs/2 + i <- old 2i + 1) turns
one into the other, and q.k is unchanged because q and k get the same permutation.

Tokenizer .bin: int32 max_token_length, then per token: float32 score, int32 length, bytes. The exporter
wrote pieces with U+2581 replaced by a space and BOS/EOS as "\\n<s>\\n" / "\\n</s>\\n"; both are undone here.
"""
import json
import os
import struct
import sys
from array import array

SPACE = "\u2581"


def read_checkpoint(path):
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack_from("<7i", data, 0)
    shared = vocab > 0
    vocab = abs(vocab)
    head = dim // n_heads
    kv_dim = n_kv * head
    cfg = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv=n_kv, vocab=vocab,
               seq_len=seq_len, shared=shared)
    floats = array("f")
    floats.frombytes(data[28:])
    if sys.byteorder != "little":
        floats.byteswap()
    pos = 0

    def take(n):
        nonlocal pos
        if pos + n > len(floats):
            raise SystemExit(f"{path}: truncated (needs {pos + n} floats, has {len(floats)})")
        out = floats[pos:pos + n]
        pos += n
        return out

    w = {"emb": take(vocab * dim), "rms_att": take(n_layers * dim), "wq": take(n_layers * dim * dim),
         "wk": take(n_layers * kv_dim * dim), "wv": take(n_layers * kv_dim * dim), "wo": take(n_layers * dim * dim),
         "rms_ffn": take(n_layers * dim), "w1": take(n_layers * hidden * dim), "w2": take(n_layers * dim * hidden),
         "w3": take(n_layers * hidden * dim), "rms_final": take(dim)}
    take(seq_len * head // 2 * 2)  # freq_cis_real, freq_cis_imag: recomputed from rope_theta instead
    if not shared:
        w["wcls"] = take(vocab * dim)
    return cfg, w


def interleaved_to_half(rows, n_heads, head, cols):
    """[n_heads * head, cols] rows reordered per head from (2i, 2i+1) pairs to (i, i + head/2) pairs."""
    out = array("f", bytes(4 * len(rows)))
    half = head // 2
    for h in range(n_heads):
        for j in range(half):
            for t in (0, 1):
                src = (h * head + 2 * j + t) * cols
                dst = (h * head + t * half + j) * cols
                out[dst:dst + cols] = rows[src:src + cols]
    return out


def write_safetensors(path, tensors):
    """tensors: list of (name, shape, array('f')). F32, little-endian, offsets in order."""
    header, offset = {}, 0
    for name, shape, a in tensors:
        n = 1
        for s in shape:
            n *= s
        assert n == len(a), (name, shape, len(a))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + 4 * n]}
        offset += 4 * n
    header["__metadata__"] = {"format": "pt"}
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)  # keep the data region 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for _, _, a in tensors:
            if sys.byteorder != "little":
                a = array("f", a)
                a.byteswap()
            f.write(a.tobytes())


def convert_weights(cfg, w, out_dir):
    d, f, nl = cfg["dim"], cfg["hidden"], cfg["n_layers"]
    head = d // cfg["n_heads"]
    kv = cfg["n_kv"] * head
    t = [("model.embed_tokens.weight", (cfg["vocab"], d), w["emb"])]
    for i in range(nl):
        p = f"model.layers.{i}."

        def layer(key, n):
            return w[key][i * n:(i + 1) * n]

        t += [
            (p + "input_layernorm.weight", (d,), layer("rms_att", d)),
            (p + "self_attn.q_proj.weight", (d, d), interleaved_to_half(layer("wq", d * d), cfg["n_heads"], head, d)),
            (p + "self_attn.k_proj.weight", (kv, d), interleaved_to_half(layer("wk", kv * d), cfg["n_kv"], head, d)),
            (p + "self_attn.v_proj.weight", (kv, d), layer("wv", kv * d)),
            (p + "self_attn.o_proj.weight", (d, d), layer("wo", d * d)),
            (p + "post_attention_layernorm.weight", (d,), layer("rms_ffn", d)),
            (p + "mlp.gate_proj.weight", (f, d), layer("w1", f * d)),
            (p + "mlp.down_proj.weight", (d, f), layer("w2", d * f)),
            (p + "mlp.up_proj.weight", (f, d), layer("w3", f * d)),
        ]
    t.append(("model.norm.weight", (d,), w["rms_final"]))
    if not cfg["shared"]:
        t.append(("lm_head.weight", (cfg["vocab"], d), w["wcls"]))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), t)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_configs(cfg, out_dir):
    write_json(os.path.join(out_dir, "config.json"), {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg["dim"],
        "intermediate_size": cfg["hidden"],
        "num_hidden_layers": cfg["n_layers"],
        "num_attention_heads": cfg["n_heads"],
        "num_key_value_heads": cfg["n_kv"],
        "vocab_size": cfg["vocab"],
        "max_position_embeddings": cfg["seq_len"],
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": cfg["shared"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    })
    write_json(os.path.join(out_dir, "generation_config.json"), {"bos_token_id": 1, "eos_token_id": 2})


def read_tokenizer(path, vocab_size):
    with open(path, "rb") as f:
        data = f.read()
    pos, pieces = 4, []
    for i in range(vocab_size):
        if pos + 8 > len(data):
            raise SystemExit(f"{path}: truncated at token {i}")
        score, n = struct.unpack_from("<fi", data, pos)
        pos += 8
        pieces.append((data[pos:pos + n].decode("utf-8"), score))
        pos += n
    return pieces


def sentencepiece_text(i, raw):
    if i == 1:
        return "<s>"
    if i == 2:
        return "</s>"
    return raw.replace(" ", SPACE)


def is_byte_piece(p):
    return len(p) == 6 and p.startswith("<0x") and p.endswith(">")


def write_tokenizer(pieces, out_dir):
    texts = [sentencepiece_text(i, p) for i, (p, _) in enumerate(pieces)]
    vocab = {t: i for i, t in enumerate(texts)}
    # BPE merges from SentencePiece scores: every split of a multi-character piece into two pieces that are
    # both in the vocabulary is a merge producing it; a higher-scoring product merges first (sentencepiece
    # BPE picks the best-scoring pair at each step). Ties broken by the ids, as the HF converter does.
    merges = []
    for i, t in enumerate(texts):
        if i < 3 or is_byte_piece(t) or len(t) < 2:
            continue
        for k in range(1, len(t)):
            a, b = t[:k], t[k:]
            if a in vocab and b in vocab:
                merges.append((-pieces[i][1], i, vocab[a], vocab[b], a, b))
    merges.sort()
    special = [{"id": i, "content": texts[i], "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i in range(3)]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[m[4], m[5]] for m in merges]},
    }
    write_json(os.path.join(out_dir, "tokenizer.json"), tok)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 512,
        "tokenizer_class": "LlamaTokenizer",
    })


def main(argv):
    if len(argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    model_path, tok_path, out_dir = argv[1:]
    os.makedirs(out_dir, exist_ok=True)
    cfg, w = read_checkpoint(model_path)
    convert_weights(cfg, w, out_dir)
    write_configs(cfg, out_dir)
    write_tokenizer(read_tokenizer(tok_path, cfg["vocab"]), out_dir)
    print(f"converted {model_path} ({cfg['n_layers']} layers, dim {cfg['dim']}, vocab {cfg['vocab']}) to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
