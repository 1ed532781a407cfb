#include "quant/formats.h"

#include "quant/quantized.h"

namespace grimoire {

const std::vector<LinearProbe>& linear_format_probes() {
    // Quantized formats go before probe_dense: a GPTQ layer has no `.weight`, but an FP8 layer has one
    // (plus `.weight_scale_inv`), so the dense probe must be asked last.
    static const std::vector<LinearProbe> probes = {
        probe_gptq,                // qweight (GPTQ v1/v2, AutoRound auto_gptq / auto_awq, AWQ)
        probe_compressed_tensors,  // weight_packed
        probe_fp8,                 // F8 weight + weight_scale_inv / weight_scale
        probe_dense,
    };
    return probes;
}

}  // namespace grimoire
