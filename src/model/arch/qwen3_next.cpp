// Qwen3NextForCausalLM: the Qwen3.5 hybrid decoder with the DeltaNet projections fused per key-head group
// (in_proj_qkvz, in_proj_ba; regrouped at load, see hybrid_layers.cpp). Only the dense form loads for now: a
// config whose layers would be mixture-of-experts (num_experts > 0 on a layer not in mlp_only_layers, with
// decoder_sparse_step) is refused naming `num_experts`.
#include <algorithm>

#include "model/arch/registry.h"
#include "model/hybrid_layers.h"

namespace grimoire {

std::unique_ptr<Model> make_qwen3_next(Backend& be, const ModelSource& src) {
    const ConfigReader& cfg = src.cfg;
    HybridConfig c;
    read_hybrid_config(cfg, src.root, c);
    const int64_t experts = cfg.get_or<int64_t>("num_experts", 512);  // transformers' default
    const int64_t step = cfg.get_or<int64_t>("decoder_sparse_step", 1);
    std::vector<int64_t> mlp_only;
    if (cfg.has("mlp_only_layers")) mlp_only = cfg.get<std::vector<int64_t>>("mlp_only_layers");
    for (int64_t i = 0; i < c.n_layers && experts > 0; ++i) {
        const bool dense = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
        if (!dense && step > 0 && (i + 1) % step == 0)
            cfg.fail("num_experts", std::to_string(experts) + " is not supported yet: layer " + std::to_string(i) +
                                        " would be a mixture-of-experts block (MoE Qwen3-Next is a later issue; "
                                        "only num_experts 0, or every layer in mlp_only_layers, loads)");
    }
    c.prefix = "model.";
    c.gdn.fused = true;
    return make_hybrid_decoder(be, src.ckpt, src.qc, c, src.info);
}

}  // namespace grimoire
