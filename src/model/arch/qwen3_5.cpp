// Qwen3.5 / Qwen3.6 dense text models: Qwen3_5ForConditionalGeneration (config nested in `text_config`, tensors
// under `model.language_model.`, the vision tower `model.visual.*` ignored) and Qwen3_5ForCausalLM (flat config,
// `model.`). Both are the hybrid decoder of hybrid_layers.h with separate in_proj_qkv / z / b / a projections;
// the `mtp.*` head is loaded when present. The MoE variants are refused by name until the MoE issue.
#include "model/arch/registry.h"
#include "model/hybrid_layers.h"

namespace grimoire {

namespace {

// The published ConditionalGeneration layout uses `model.language_model.`; text-only saves use `model.`. Probe
// the embedding so either class name loads either layout.
std::string text_prefix(const ModelSource& src) {
    for (const char* p : {"model.language_model.", "model."})
        if (src.ckpt.has(std::string(p) + "embed_tokens.weight")) return p;
    throw Error(src.ckpt.dir() + ": tensor 'model.language_model.embed_tokens.weight' not found (nor "
                "'model.embed_tokens.weight')");
}

void refuse_experts(const ConfigReader& cfg) {
    if (const auto n = cfg.get_or<int64_t>("num_experts", 0); n > 0)
        cfg.fail("num_experts", std::to_string(n) + " is not supported yet (mixture-of-experts Qwen3.5 models are a "
                                                    "later issue)");
}

}  // namespace

std::unique_ptr<Model> make_qwen3_5(Backend& be, const ModelSource& src) {
    refuse_experts(src.cfg);
    HybridConfig c;
    read_hybrid_config(src.cfg, src.root, c);
    c.prefix = text_prefix(src);
    return make_hybrid_decoder(be, src.ckpt, src.qc, c, src.info);
}

// Qwen3_5MoeForConditionalGeneration / Qwen3_5MoeForCausalLM (35B-A3B and friends).
std::unique_ptr<Model> refuse_qwen3_5_moe(Backend&, const ModelSource& src) {
    const std::string arch = src.info.architecture;
    throw Error(src.root.file() + ": architectures[0]: \"" + arch + "\" is not supported yet (model_type \"" +
                src.root.get_or<std::string>("model_type", "") + "\": mixture-of-experts Qwen3.5 models are a "
                "later issue)");
}

}  // namespace grimoire
