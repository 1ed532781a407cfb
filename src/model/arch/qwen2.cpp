// Qwen2ForCausalLM (Qwen2, Qwen2.5): the Llama layout with a bias on q/k/v_proj (always, not configurable in
// transformers) and none on o_proj. Sliding-window attention (use_sliding_window) is refused.
#include "model/arch/registry.h"
#include "model/layers.h"

namespace grimoire {

std::unique_ptr<Model> make_qwen2(Backend& be, const ModelSource& src) {
    DenseDecoderConfig c;
    read_dense_decoder_config(src.cfg, c);
    c.attn.qkv_bias = true;
    c.attn.o_bias = false;
    return make_dense_decoder(be, src.ckpt, src.qc, c, src.info);
}

}  // namespace grimoire
