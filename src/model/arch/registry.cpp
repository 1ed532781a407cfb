#include "model/arch/registry.h"

namespace grimoire {

// Factories, one per architecture file in src/model/arch/.
std::unique_ptr<Model> make_llama(Backend& be, const ModelSource& src);       // llama.cpp
std::unique_ptr<Model> make_qwen2(Backend& be, const ModelSource& src);       // qwen2.cpp
std::unique_ptr<Model> make_qwen3(Backend& be, const ModelSource& src);       // qwen3.cpp
std::unique_ptr<Model> refuse_qwen3_moe(Backend& be, const ModelSource& src);  // qwen3.cpp
std::unique_ptr<Model> make_qwen3_5(Backend& be, const ModelSource& src);        // qwen3_5.cpp
std::unique_ptr<Model> refuse_qwen3_5_moe(Backend& be, const ModelSource& src);  // qwen3_5.cpp
std::unique_ptr<Model> make_qwen3_next(Backend& be, const ModelSource& src);     // qwen3_next.cpp

const std::vector<ArchEntry>& architectures() {
    static const std::vector<ArchEntry> table = {
        {"LlamaForCausalLM", make_llama},
        {"Qwen2ForCausalLM", make_qwen2},
        {"Qwen3ForCausalLM", make_qwen3},
        {"Qwen3MoeForCausalLM", refuse_qwen3_moe},
        {"Qwen3_5ForConditionalGeneration", make_qwen3_5},
        {"Qwen3_5ForCausalLM", make_qwen3_5},
        {"Qwen3_5MoeForConditionalGeneration", refuse_qwen3_5_moe},
        {"Qwen3_5MoeForCausalLM", refuse_qwen3_5_moe},
        {"Qwen3NextForCausalLM", make_qwen3_next},
    };
    return table;
}

const ArchEntry* find_architecture(std::string_view name) {
    for (const ArchEntry& e : architectures())
        if (name == e.name) return &e;
    return nullptr;
}

}  // namespace grimoire
