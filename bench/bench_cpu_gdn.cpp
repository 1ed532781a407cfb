// Gated DeltaNet on the CPU: the recurrent kernel (what CpuBackend::gated_delta_rule runs) against the chunked
// (chunk 64) kernel, on one Qwen3.5-27B DeltaNet layer's geometry (16 key / 48 value heads of 128), for a prefill
// of T tokens. Both do ~4 dk dv multiply-adds per token and value head; the chunked form only pays off where its
// small dense products map to matrix units (the GPU). Prints tokens/s of each and the chunked/recurrent ratio.
//
//   bench_cpu_gdn [T=512] [reps=3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/threadpool.h"
#include "kernels/cpu/gated_delta_chunked.h"

using namespace grimoire;

int main(int argc, char** argv) {
    const int64_t T = argc > 1 ? std::atoll(argv[1]) : 512;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
    const cpu::GdnShape s{T, 16, 48, 128, 128};
    std::mt19937 rng(1);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    auto random = [&](int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = n01(rng);
        return v;
    };
    const auto q = random(T * s.Hk * s.dk), k = random(T * s.Hk * s.dk), v = random(T * s.Hv * s.dv);
    const auto a = random(T * s.Hv), b = random(T * s.Hv), A_log = random(s.Hv), dt_bias = random(s.Hv);
    std::vector<float> state(static_cast<size_t>(s.Hv * s.dk * s.dv)), out(static_cast<size_t>(T * s.Hv * s.dv));

    auto best_seconds = [&](bool chunked) {
        double best = 1e30;
        for (int r = 0; r < reps; ++r) {
            std::fill(state.begin(), state.end(), 0.0f);
            const auto t0 = std::chrono::steady_clock::now();
            if (chunked)
                cpu::gated_delta_chunked(q.data(), k.data(), v.data(), a.data(), b.data(), A_log.data(),
                                         dt_bias.data(), state.data(), s, out.data());
            else
                cpu::gated_delta_rule(q.data(), k.data(), v.data(), a.data(), b.data(), A_log.data(),
                                      dt_bias.data(), state.data(), s, out.data());
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return best;
    };
    const double rec = best_seconds(false), chk = best_seconds(true);
    std::printf("gated delta rule, T=%lld, Hk=16 Hv=48 dk=dv=128, %d threads, best of %d\n",
                static_cast<long long>(T), cpu_threads(), reps);
    std::printf("recurrent: %.1f ms (%.0f tokens/s)\n", rec * 1e3, T / rec);
    std::printf("chunked:   %.1f ms (%.0f tokens/s)\n", chk * 1e3, T / chk);
    std::printf("chunked / recurrent throughput: %.2f\n", rec / chk);
}
