// A fixed pool of worker threads for the CPU backend's data-parallel loops.
#pragma once
#include <cstdint>
#include <functional>

namespace grimoire {

// Number of threads parallel_for uses (GRIMOIRE_THREADS or hardware_concurrency).
int cpu_threads();

// Runs fn(begin, end) over [0, n) split into contiguous chunks, one per worker, and waits.
// Chunks are at least `grain` long so tiny loops stay on the calling thread.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

}  // namespace grimoire
