// Per-sequence model state behind one handle: the KV cache of attention layers and the conv / recurrent
// state of linear-attention (Gated DeltaNet) layers. Tensors are allocated from the backend's persistent
// memory and released with the handle (RAII). Later issues extend it (batch slots, rollback, prefix reuse).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace grimoire {

struct LayerState {
    Tensor k_cache, v_cache;     // [max_ctx, Hkv, D] act dtype (attention layers)
    Tensor conv_state;           // [K-1, C] act dtype (DeltaNet layers)
    Tensor recurrent_state;      // [Hv, dk, dv] F32 (DeltaNet layers)
};

class SequenceState {
public:
    SequenceState(Backend& be, int64_t max_ctx) : be_(be), max_ctx_(max_ctx) {}
    ~SequenceState() {
        for (auto& l : layers)
            for (Tensor* t : {&l.k_cache, &l.v_cache, &l.conv_state, &l.recurrent_state})
                if (t->data) be_.free_persistent(*t);
    }
    SequenceState(const SequenceState&) = delete;
    SequenceState& operator=(const SequenceState&) = delete;

    int64_t max_ctx() const { return max_ctx_; }
    int64_t n_past = 0;  // tokens already in the caches
    std::vector<LayerState> layers;
    std::vector<LayerState> extra_layers;  // e.g. the MTP head's own layer(s)

    // Clears every cache so the handle can start a new sequence.
    void reset() {
        n_past = 0;
        for (auto* v : {&layers, &extra_layers})
            for (auto& l : *v)
                for (Tensor* t : {&l.conv_state, &l.recurrent_state})
                    if (t->data) be_.zero(*t);
    }

private:
    Backend& be_;
    int64_t max_ctx_;
};

}  // namespace grimoire
