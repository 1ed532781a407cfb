"""The demo model: transformers' Qwen3.5 text model plus the MTP head (transformers has no MTP module).

Shared by train.py (training, export), make_demo_fixture.py (reference logits) and write_report.py.
The exported checkpoint uses the published Qwen3.5 layout: a `qwen3_5` config with a nested `text_config`,
LM tensors under `model.language_model.`, `lm_head.weight`, and the MTP head under `mtp.`.
"""
import copy
import json
import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5RMSNorm

VOCAB = 8192
EOT_ID = 8185      # <|endoftext|>
IM_END_ID = 8187   # <|im_end|>

# The demo geometry: the real Qwen3.5 layer mix at small size (see models/demo/TRAINING.md).
TEXT_CONFIG = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=8,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 2,
    full_attention_interval=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=128,
    attn_output_gate=True,
    attention_bias=False,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    hidden_act="silu",
    rms_norm_eps=1e-6,
    max_position_embeddings=4096,
    # mrope_section covers the 16 rotary frequencies (128 * 0.25 / 2); a no-op for text (t = h = w).
    rope_parameters={"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                     "mrope_section": [6, 5, 5], "mrope_interleaved": True},
    partial_rotary_factor=0.25,
    tie_word_embeddings=False,
    mtp_num_hidden_layers=1,
    mtp_use_dedicated_embeddings=False,
    mamba_ssm_dtype="float32",
    initializer_range=0.02,
    bos_token_id=EOT_ID,
    eos_token_id=EOT_ID,
    pad_token_id=None,
    use_cache=True,
)


def text_config(**overrides):
    kw = copy.deepcopy(TEXT_CONFIG)
    kw.update(overrides)
    cfg = Qwen3_5TextConfig(**kw)
    cfg._attn_implementation = "sdpa"
    return cfg


class MTPHead(nn.Module):
    """Qwen3.5 multi-token-prediction head (models-and-formats.md 1.6).

    Input at position p: the embedding of token x[p+1] and the main model's post-norm final hidden h[p];
    output: logits for x[p+2] through the shared lm_head.
    """

    def __init__(self, cfg):
        super().__init__()
        h = cfg.hidden_size
        self.pre_fc_norm_embedding = Qwen3_5RMSNorm(h, eps=cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = Qwen3_5RMSNorm(h, eps=cfg.rms_norm_eps)
        self.fc = nn.Linear(2 * h, h, bias=False)
        layer_cfg = copy.deepcopy(cfg)
        layer_cfg.layer_types = ["full_attention"]   # the MTP layer is always full attention
        layer_cfg.num_hidden_layers = 1
        layer_cfg._attn_implementation = cfg._attn_implementation
        self.layers = nn.ModuleList([Qwen3_5DecoderLayer(layer_cfg, 0)])
        self.norm = Qwen3_5RMSNorm(h, eps=cfg.rms_norm_eps)

    def forward(self, next_embeds, hidden, position_embeddings):
        # next_embeds: [B, T, H] embeddings of x[p+1]; hidden: [B, T, H] main post-norm hidden at p
        u = self.fc(torch.cat([self.pre_fc_norm_embedding(next_embeds), self.pre_fc_norm_hidden(hidden)], dim=-1))
        for layer in self.layers:
            u = layer(u, position_embeddings=position_embeddings, attention_mask=None)
        return self.norm(u)   # [B, T, H], fed to the shared lm_head


class DemoLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.lm = Qwen3_5ForCausalLM(cfg)
        self.mtp = MTPHead(cfg)
        self.mtp.apply(self.lm._init_weights)

    def hidden(self, ids):
        # ids: [B, T] int64 -> post-norm final hidden [B, T, H]
        return self.lm.model(input_ids=ids, use_cache=False).last_hidden_state

    def mtp_hidden(self, ids, hidden):
        """MTP hidden for positions 0..T-2 (predicting x[p+2]); ids [B, T], hidden [B, T, H]."""
        t = ids.shape[1] - 1
        next_embeds = self.lm.model.embed_tokens(ids[:, 1:])
        # [3, 1, t]: the (t, h, w) rows of text positions; transformers 5.17 requires the 3-row form, 5.23
        # accepts it too. Positions are those of h (unchanged, as vLLM's first MTP step).
        pos = torch.arange(t, device=ids.device)[None, None, :].expand(3, 1, t)
        pe = self.lm.model.rotary_emb(hidden, pos)
        return self.mtp(next_embeds, hidden[:, :t], pe)

    def losses(self, seq):
        """seq: [B, T+1] tokens. Returns (main next-token loss, MTP next-next-token loss, main logits)."""
        ids, labels = seq[:, :-1], seq[:, 1:]
        h = self.hidden(ids)
        logits = self.lm.lm_head(h)
        main = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        mh = self.mtp_hidden(ids, h)                       # [B, T-1, H] predicts seq[:, 2:]
        mlogits = self.lm.lm_head(mh)
        mtp = F.cross_entropy(mlogits.float().reshape(-1, mlogits.shape[-1]), seq[:, 2:].reshape(-1))
        return main, mtp, logits, mlogits


def export_state_dict(model, dtype=torch.bfloat16):
    """State dict in the published Qwen3.5 naming, contiguous, in `dtype`."""
    out = {}
    for k, v in model.lm.state_dict().items():
        if k.startswith("model."):
            k = "model.language_model." + k[len("model."):]
        out[k] = v.detach().to(dtype).contiguous().cpu()
    for k, v in model.mtp.state_dict().items():
        out["mtp." + k] = v.detach().to(dtype).contiguous().cpu()
    return out


def published_config(cfg):
    """config.json contents: Qwen3_5ForConditionalGeneration layout, text-only (no vision_config)."""
    text = {k: v for k, v in cfg.to_dict().items()
            if k not in ("architectures", "id2label", "label2id", "transformers_version", "_name_or_path",
                         "output_hidden_states", "output_attentions", "return_dict", "problem_type",
                         "chunk_size_feed_forward", "is_encoder_decoder", "dtype")}
    for k in ("full_attention_interval", "attn_output_gate", "partial_rotary_factor", "mtp_num_hidden_layers",
              "mtp_use_dedicated_embeddings", "mamba_ssm_dtype"):
        text[k] = TEXT_CONFIG[k]
    text["model_type"] = "qwen3_5_text"
    text["dtype"] = "bfloat16"
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": dict(sorted(text.items())),
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }


GENERATION_CONFIG = {
    "bos_token_id": EOT_ID,
    "eos_token_id": [IM_END_ID, EOT_ID],
    "pad_token_id": EOT_ID,
    "do_sample": True,
    "temperature": 0.7,
    "top_k": 20,
    "top_p": 0.95,
}


def load_demo(model_dir, dtype=torch.float32):
    """Load a checkpoint written by export (main model via transformers, MTP from mtp.* tensors)."""
    from safetensors.torch import load_file
    with open(os.path.join(model_dir, "config.json")) as f:
        tc = json.load(f)["text_config"]
    cfg = text_config(**{k: v for k, v in tc.items() if k in TEXT_CONFIG})
    model = DemoLM(cfg)
    sd = load_file(os.path.join(model_dir, "model.safetensors"))
    lm_sd = {}
    for k, v in sd.items():
        if k.startswith("model.language_model."):
            lm_sd["model." + k[len("model.language_model."):]] = v
        elif k == "lm_head.weight":
            lm_sd[k] = v
    model.lm.load_state_dict(lm_sd, strict=True)
    model.mtp.load_state_dict({k[4:]: v for k, v in sd.items() if k.startswith("mtp.")}, strict=True)
    return model.to(dtype).eval()
