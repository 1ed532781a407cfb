// libFuzzer target: arbitrary bytes through the in-memory SafetensorsFile constructor. A defect must come
// back as grimoire::Error; anything else (another exception, a crash, an ASan report, a read outside the
// buffer when touching an accepted tensor) is a finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        grimoire::SafetensorsFile f(data, size, "fuzz.safetensors");
        // Every accepted tensor must lie inside the buffer: touch its first and last byte.
        volatile uint8_t sink = 0;
        for (const auto& [name, t] : f.tensors()) {
            if (t.nbytes == 0) continue;
            sink = sink + t.data[0] + t.data[t.nbytes - 1];
            if (t.data < data || t.data + t.nbytes > data + size) __builtin_trap();
        }
    } catch (const grimoire::Error&) {
    }
    return 0;
}
