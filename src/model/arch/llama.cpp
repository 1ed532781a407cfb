// LlamaForCausalLM (Llama 2 / 3.x and the many checkpoints in its layout): RMSNorm, GQA attention with RoPE
// (rope_scaling default / linear / llama3 / yarn, via make_rope_params), SwiGLU MLP, lm_head tied or not.
// Optional biases: attention_bias puts a bias on q/k/v/o_proj, mlp_bias on gate/up/down_proj (as
// transformers).
#include "model/arch/registry.h"
#include "model/layers.h"

namespace grimoire {

std::unique_ptr<Model> make_llama(Backend& be, const ModelSource& src) {
    DenseDecoderConfig c;
    read_dense_decoder_config(src.cfg, c);
    const bool attention_bias = src.cfg.get_or<bool>("attention_bias", false);
    c.attn.qkv_bias = attention_bias;
    c.attn.o_bias = attention_bias;
    c.mlp_bias = src.cfg.get_or<bool>("mlp_bias", false);
    return make_dense_decoder(be, src.ckpt, src.qc, c, src.info);
}

}  // namespace grimoire
