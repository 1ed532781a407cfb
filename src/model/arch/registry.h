// The architectures grimoire can load, keyed by config.json's `architectures[0]`. An explicit table of
// factory functions (registry.cpp), not static-initialiser registration: the library is static, so
// self-registering objects in unreferenced translation units would be dropped by the linker.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "quant/linear.h"

namespace grimoire {

// What a factory gets: the parsed config (text part and whole file), the tensors, and ModelInfo pre-filled by
// the loader (architecture, model_type, sizes, bos/eos, dtypes); the factory returns the built model.
struct ModelSource {
    const ConfigReader& cfg;   // text_config when the file nests one, else the whole config.json
    const ConfigReader& root;  // the whole config.json (architectures, quantization_config, vision parts...)
    const Checkpoint& ckpt;
    QuantConfig qc;
    ModelInfo info;
};

using ArchFactory = std::unique_ptr<Model> (*)(Backend& be, const ModelSource& src);

struct ArchEntry {
    const char* name;  // e.g. "LlamaForCausalLM"
    ArchFactory make;
};

// Every registered architecture, in registry order.
const std::vector<ArchEntry>& architectures();
// nullptr when `name` is not registered.
const ArchEntry* find_architecture(std::string_view name);

}  // namespace grimoire
