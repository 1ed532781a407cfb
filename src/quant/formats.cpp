#include "quant/formats.h"

namespace grimoire {

const std::vector<LinearProbe>& linear_format_probes() {
    // Quantized formats go before probe_dense: a GPTQ layer has no `.weight`, but an FP8 layer has one
    // (plus `.weight_scale_inv`), so the dense probe must be asked last.
    static const std::vector<LinearProbe> probes = {
        probe_dense,
    };
    return probes;
}

}  // namespace grimoire
