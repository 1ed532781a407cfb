// Qwen3ForCausalLM (dense Qwen3): the Llama layout plus a per-head RMSNorm (plain w * x / rms(x), over
// head_dim) on q and k before RoPE; head_dim is explicit and often differs from hidden_size /
// num_attention_heads. attention_bias (default false) puts a bias on q/k/v/o_proj as in transformers.
#include "model/arch/registry.h"
#include "model/layers.h"

namespace grimoire {

std::unique_ptr<Model> make_qwen3(Backend& be, const ModelSource& src) {
    DenseDecoderConfig c;
    read_dense_decoder_config(src.cfg, c);
    c.attn.qk_norm = true;
    const bool attention_bias = src.cfg.get_or<bool>("attention_bias", false);
    c.attn.qkv_bias = attention_bias;
    c.attn.o_bias = attention_bias;
    return make_dense_decoder(be, src.ckpt, src.qc, c, src.info);
}

// Qwen3-MoE (experts + router) is a later issue; refuse it by name rather than fail on a missing mlp tensor.
std::unique_ptr<Model> refuse_qwen3_moe(Backend&, const ModelSource& src) {
    throw Error(src.root.file() +
                ": architectures[0]: \"Qwen3MoeForCausalLM\" is not supported yet "
                "(mixture-of-experts models are a later issue)");
}

}  // namespace grimoire
