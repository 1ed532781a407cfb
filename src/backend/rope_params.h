// RopeParams from a Hugging Face config: inv_freq for rope types default, linear, llama3 and yarn, computed
// as transformers' ROPE_INIT_FUNCTIONS do (checked against them by tests/unit/test_config_rope.cpp).
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "io/config.h"

namespace grimoire {

// Reads `rope_parameters` (transformers 5) or `rope_scaling` (older configs), with rope_theta inside it or at
// the top level (default 10000). rot_dim = int(head_dim * partial_rotary_factor); a negative
// partial_rotary_factor means "from the config" (rope_parameters.partial_rotary_factor, then the top-level
// key, else 1.0). Returns neox = true; GPT-J style models set it false afterwards. Throws Error naming the key
// and value for an unsupported type ("dynamic", "longrope", ...) or a missing required field.
RopeParams make_rope_params(const ConfigReader& cfg, int64_t head_dim, float partial_rotary_factor = -1.0f);

}  // namespace grimoire
