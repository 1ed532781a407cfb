// CPU matmul throughput: out [T, N] = x [T, K] @ w [N, K]^T for BF16 / F32 weights, and the quantized
// matmuls (dequant.h: INT4 group 128 in the CPU's canonical one-code-per-byte layout, FP8 E4M3 128 x 128
// blocks; bytes counted as that layout reads them), over a range of T, with
// two anchors measured on the same machine: the read bandwidth of a plain parallel sum over the same
// working set (decode is bound by it) and the fp32 FMA peak of a register-only loop (prefill is bound by it).
// Successive calls cycle through enough copies of the weight to fill --wset-mb, so the weights come from
// DRAM as in a real model (not from a large L3). Prints one line per case; --json PATH writes the figures.
//
//   bench_cpu_matmul [--K 2048] [--N 2048] [--T 1,4,16,64,256] [--reps-ms 300] [--wset-mb 512] [--json out.json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/threadpool.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/kernels.h"

using namespace grimoire;
using Clock = std::chrono::steady_clock;

namespace {

// Runs fn repeatedly for about `ms` milliseconds (at least 3 times) and returns the best seconds per call.
template <class F>
double best_time(F&& fn, double ms) {
    fn();
    double best = 1e30, spent = 0.0;
    for (int i = 0; i < 3 || spent < ms / 1e3; ++i) {
        const auto t0 = Clock::now();
        fn();
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        best = std::min(best, s);
        spent += s;
    }
    return best;
}

typedef float v8f __attribute__((vector_size(32)));

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define BENCH_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define BENCH_CLONES
#endif

// Sum of [a, b) with four independent vector accumulators: a pure streaming read.
BENCH_CLONES float sum_range(const float* p, int64_t a, int64_t b) {
    v8f acc[4] = {};
    int64_t i = a;
    for (; i + 32 <= b; i += 32)
        for (int j = 0; j < 4; ++j) {
            v8f v;
            std::memcpy(&v, p + i + 8 * j, sizeof v);
            acc[j] += v;
        }
    float s = 0;
    for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 8; ++l) s += acc[j][l];
    for (; i < b; ++i) s += p[i];
    return s;
}

double read_bandwidth_gbs(double ms, size_t bytes) {
    const size_t n = bytes / 4;
    std::vector<float> buf(n, 1.0f);
    std::vector<float> partial(static_cast<size_t>(cpu_threads()) * 16);
    const double s = best_time([&] {
        parallel_for(static_cast<int64_t>(n), [&](int64_t a, int64_t b) {
            partial[static_cast<size_t>(a * cpu_threads() / static_cast<int64_t>(n)) * 16] = sum_range(buf.data(), a, b);
        });
    }, ms);
    return static_cast<double>(n * 4) / s / 1e9;
}

BENCH_CLONES float fma_loop(int64_t iters, float seed) {
    v8f a[8];
    for (int j = 0; j < 8; ++j) a[j] = v8f{} + seed * static_cast<float>(j + 1);
    const v8f m = v8f{} + 0.999999f, c = v8f{} + 1e-7f;
    for (int64_t i = 0; i < iters; ++i)
        for (int j = 0; j < 8; ++j) a[j] = a[j] * m + c;
    float s = 0;
    for (int j = 0; j < 8; ++j) s += a[j][0];
    return s;
}

double fma_peak_gflops(double ms) {
    const int64_t iters = 20'000'000;
    std::vector<float> sink(static_cast<size_t>(cpu_threads()));
    const double s = best_time([&] {
        parallel_for(cpu_threads(), [&](int64_t a, int64_t b) {
            for (int64_t i = a; i < b; ++i) sink[static_cast<size_t>(i)] = fma_loop(iters, 1.0f + static_cast<float>(i));
        });
    }, ms);
    return static_cast<double>(cpu_threads()) * static_cast<double>(iters) * 8 * 8 * 2 / s / 1e9;
}

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> v;
    std::stringstream ss(s);
    for (std::string tok; std::getline(ss, tok, ',');) v.push_back(std::stoll(tok));
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    int64_t K = 2048, N = 2048;
    std::vector<int64_t> Ts = {1, 4, 16, 64, 256};
    double ms = 300;
    size_t wset_mb = 512;
    std::string json_path;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--K") K = std::stoll(v);
        else if (a == "--N") N = std::stoll(v);
        else if (a == "--T") Ts = parse_list(v);
        else if (a == "--reps-ms") ms = std::stod(v);
        else if (a == "--json") json_path = v;
        else if (a == "--wset-mb") wset_mb = std::stoull(v);
        else {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            return 2;
        }
    }
    const double bw = read_bandwidth_gbs(ms, wset_mb << 20), peak = fma_peak_gflops(ms);
    std::printf("threads %d  read bandwidth %.1f GB/s  fp32 FMA peak %.1f GFLOP/s\n", cpu_threads(), bw, peak);

    std::mt19937 rng(1);
    std::normal_distribution<float> d;
    const size_t nk = static_cast<size_t>(N * K);
    const size_t copies = std::max<size_t>(1, (wset_mb << 20) / (nk * 4));
    std::vector<float> wf(nk * copies);
    for (size_t i = 0; i < nk; ++i) wf[i] = d(rng);
    for (size_t c = 1; c < copies; ++c) std::copy(wf.begin(), wf.begin() + static_cast<std::ptrdiff_t>(nk), wf.begin() + static_cast<std::ptrdiff_t>(c * nk));
    std::vector<uint16_t> wb(nk * copies * 2);  // the same bytes footprint as the F32 copies
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(wf[i % nk]);
    std::printf("weight working set %zu MiB (%zu F32 copies)\n", wset_mb, copies);
    const int64_t Tmax = *std::max_element(Ts.begin(), Ts.end());
    std::vector<float> x(static_cast<size_t>(Tmax * K)), out(static_cast<size_t>(Tmax * N));
    for (auto& v : x) v = d(rng);

    nlohmann::json metrics, ratios;
    for (DType dt : {DType::BF16, DType::F32}) {
        const size_t ncopies = dt == DType::BF16 ? 2 * copies : copies;
        for (int64_t T : Ts) {
            size_t next = 0;
            const double s = best_time([&] {
                const void* w = dt == DType::BF16 ? static_cast<const void*>(wb.data() + next * nk)
                                                  : static_cast<const void*>(wf.data() + next * nk);
                next = (next + 1) % ncopies;
                cpu::matmul(x.data(), w, dt, T, K, N, out.data());
            }, ms);
            const double gflops = 2.0 * static_cast<double>(T * K * N) / s / 1e9;
            const double bytes = static_cast<double>(N * K) * static_cast<double>(dtype_size(dt)) + 4.0 * static_cast<double>(T * (K + N));
            const double gbs = bytes / s / 1e9;
            std::printf("%-4s T=%-4lld K=%lld N=%lld  %8.3f ms  %7.1f GFLOP/s  %6.1f GB/s  (%.0f%% of bandwidth, %.0f%% of FMA peak)\n",
                        std::string(dtype_name(dt)).c_str(), static_cast<long long>(T), static_cast<long long>(K),
                        static_cast<long long>(N), s * 1e3, gflops, gbs, 100 * gbs / bw, 100 * gflops / peak);
            const std::string key = std::string(dtype_name(dt)) + "_T" + std::to_string(T);
            metrics[key + "_gflops"] = gflops;
            metrics[key + "_gbs"] = gbs;
            ratios[key + "_bw"] = gbs / bw;
            ratios[key + "_peak"] = gflops / peak;
        }
    }
    // Quantized weights: codes in the same working set, scales per 128 channels (INT4 symmetric, zero 8; its
    // codes two a byte, Int4Weights' layout).
    const int64_t G = (K + 127) / 128;
    const size_t nk4 = static_cast<size_t>(N * cpu::int4_row_bytes(K));
    std::vector<uint8_t> codes(nk4 * copies);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() & 0xFF);
    std::vector<uint8_t> f8codes(nk * copies);
    for (auto& c : f8codes) c = static_cast<uint8_t>(rng() & 0xBF);  // finite E4M3, |w| < 2
    std::vector<int32_t> zeros(static_cast<size_t>(G * N), 8), g_idx(static_cast<size_t>(K));
    std::vector<float> scales(static_cast<size_t>(G * N), 0.01f), fscales(static_cast<size_t>(G * ((N + 127) / 128)), 0.01f);
    for (int64_t k = 0; k < K; ++k) g_idx[static_cast<size_t>(k)] = static_cast<int32_t>(k / 128);
    for (const char* q : {"INT4", "FP8"}) {
        const bool fp8 = q[0] == 'F';
        const double wbytes = (fp8 ? static_cast<double>(N * K) : static_cast<double>(nk4)) + (fp8 ? 4.0 * static_cast<double>(fscales.size()) : 8.0 * static_cast<double>(G * N));
        for (int64_t T : Ts) {
            size_t next = 0;
            const double s = best_time([&] {
                const size_t off = next * (fp8 ? nk : nk4);
                next = (next + 1) % copies;
                if (fp8) {
                    cpu::Fp8Weights w;
                    w.w = f8codes.data() + off, w.scales = fscales.data(), w.N = N, w.K = K, w.bn = 128, w.bk = 128;
                    cpu::matmul_fp8(x.data(), w, T, out.data());
                } else {
                    cpu::Int4Weights w;
                    w.q = codes.data() + off, w.zeros = zeros.data(), w.scales = scales.data(), w.g_idx = g_idx.data();
                    w.N = N, w.K = K, w.G = G;
                    cpu::matmul_int4(x.data(), w, T, out.data());
                }
            }, ms);
            const double gflops = 2.0 * static_cast<double>(T * K * N) / s / 1e9;
            const double gbs = (wbytes + 4.0 * static_cast<double>(T * (K + N))) / s / 1e9;
            std::printf("%-4s T=%-4lld K=%lld N=%lld  %8.3f ms  %7.1f GFLOP/s  %6.1f GB/s  (%.0f%% of bandwidth, %.0f%% of FMA peak)\n",
                        q, static_cast<long long>(T), static_cast<long long>(K), static_cast<long long>(N), s * 1e3,
                        gflops, gbs, 100 * gbs / bw, 100 * gflops / peak);
            const std::string key = std::string(q) + "_T" + std::to_string(T);
            metrics[key + "_ms"] = s * 1e3;
            metrics[key + "_gflops"] = gflops;
            ratios[key + "_bw"] = gbs / bw;
            ratios[key + "_peak"] = gflops / peak;
        }
    }
    metrics["read_bandwidth_gbs"] = bw;
    metrics["fma_peak_gflops"] = peak;
    if (!json_path.empty()) {
        std::ofstream f(json_path);
        f << nlohmann::json{{"K", K}, {"N", N}, {"threads", cpu_threads()}, {"metrics", metrics}, {"ratios", ratios}}.dump(1)
          << "\n";
    }
    return 0;
}
