// Variants of the one-to-eight-row kernel (quant_qmv.cuh) on the 27B layer shapes, in one process so that
// every figure is comparable to the committed configuration measured beside it (INT4 one row and four rows,
// FP8 one row):
//   * the kernel as qmm.cu launches it (one-tile and two-tile blocks) and other block shapes (n-tiles per
//   block,
//     chunks in flight, blocks per SM);
//   * ablations (quant_qmv.cuh's ABL mask: no dequant, no mma, no x loads, no group flush): wrong results,
//   the
//     time says what each part of the per-chunk work costs;
//   * floors: the kernel's own loads with nothing else (same grid, warps and addresses; D chunks in flight),
//   and
//     a flat grid-stride 16-byte read of the same bytes.
//
//   bench_qmv_variants [--out results.json] [--commit SHA] [--only SUBSTRING,...] [--shapes NAME:N:K,...]
//
// --shapes replaces the six 27B shapes (e.g. a weight whose n-tiles are a multiple of the SMs, to see what
// the last partial wave of blocks costs).
//
// INT4 symmetric g128 with F16 scales, M = 1, random weights rotated over > 400 MB of copies (every launch
// reads HBM), launched back to back with programmatic dependent launch as the decode graph does. Every
// variant that computes the full result is checked bit for bit against the committed one-tile kernel (same
// per-warp chunk ranges and summation order). Prints a table; --out writes the bench/results format (metrics:
// us per shape and variant; ratios: bytes / time over the copy bandwidth measured first).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "core/tensor.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_qmv.cuh"
#include "qmv_streamk.cuh"

namespace gc = grimoire::cuda;
namespace qmm = grimoire::cuda::qmm;
using grimoire::DType;
using grimoire::Tensor;
using grimoire::bench::add_entry;
using grimoire::bench::check;
using grimoire::bench::copy_bandwidth;
using grimoire::bench::time_ms;
using grimoire::bench::write_record_text;
using qmm::Args;

namespace {

// The committed kernel's loads with nothing else: NTB tiles per block, 8 warps splitting K, D chunks in
// flight per warp, issued before the PDL wait. The words are XOR-folded so the loads stay; y is written only
// on an impossible value.
template <int NTB, int D, int VEC = 1>
__global__ void __launch_bounds__(qmm::kQmvThreads, 3) loads_only(const Args a) {
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int c0 = warp * a.KC / qmm::kQmvWarps, c1 = (warp + 1) * a.KC / qmm::kQmvWarps;
    const uint4* wb = reinterpret_cast<const uint4*>(a.words);
    const uint4* wp[NTB];
#pragma unroll
    for (int j = 0; j < NTB; ++j) {
        const int nt = min(static_cast<int>(blockIdx.x) * NTB + j, a.NT - 1);
        wp[j] = wb + (grimoire::tile_index(nt, c0, a.NT, a.KC) * 32 + lane) * VEC;
    }
    const int64_t wstride = static_cast<int64_t>(a.NT) * 32 * VEC;
    uint4 wq[D][NTB][VEC];
    int lc = c0;
    auto load = [&](int s) {
        if (lc >= c1) return;
#pragma unroll
        for (int j = 0; j < NTB; ++j) {
#pragma unroll
            for (int u = 0; u < VEC; ++u) wq[s][j][u] = qmm::ld_stream(wp[j] + u);
            wp[j] += wstride;
        }
        ++lc;
    };
#pragma unroll
    for (int s = 0; s < D; ++s) load(s);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    uint32_t h = 0;
    for (int cb = c0; cb < c1; cb += D) {
#pragma unroll
        for (int s = 0; s < D; ++s) {
            if (cb + s >= c1) break;
#pragma unroll
            for (int j = 0; j < NTB; ++j)
#pragma unroll
                for (int u = 0; u < VEC; ++u)
                    h ^= wq[s][j][u].x ^ wq[s][j][u].y ^ wq[s][j][u].z ^ wq[s][j][u].w;
            load(s);
        }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    if (h == 0x12345678u) static_cast<float*>(a.y)[blockIdx.x] = 1.0f;
}

// A flat grid-stride 16-byte read of the weight's bytes.
__global__ void __launch_bounds__(256) flat_read(const Args a) {
    const uint4* p = reinterpret_cast<const uint4*>(a.words);
    const int64_t n =
        static_cast<int64_t>(a.NT) * a.KC * 32 * (a.bn > 0 ? 2 : 1);  // bn > 0: FP8 (twice the words)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    uint32_t h = 0;
    for (int64_t i = blockIdx.x * 256 + static_cast<int64_t>(threadIdx.x); i < n;
         i += static_cast<int64_t>(gridDim.x) * 256) {
        const uint4 v = qmm::ld_stream(p + i);
        h ^= v.x ^ v.y ^ v.z ^ v.w;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    if (h == 0x12345678u) static_cast<float*>(a.y)[blockIdx.x] = 1.0f;
}

// A launch as the decode graph makes it: programmatic dependent launch (the kernels wait before reading x).
void launch(void (*kernel)(Args), int grid, size_t smem, const Args& a) {
    const int threads = kernel == flat_read ? 256 : qmm::kQmvThreads;
    gc::launch_pdl_if(true, kernel, dim3(static_cast<unsigned>(grid)), dim3(static_cast<unsigned>(threads)),
                      smem, nullptr, a);
    check(cudaGetLastError(), "launch");
}

struct Variant {
    std::string name;
    bool exact;  // computes the committed kernel's result
    void (*kernel)(Args);
    int ntb;     // n-tiles per block (0: flat read)
    int blocks;  // flat read grid
    int smem;    // 0: none, 1: qmv_smem (x staged), 2: qmv_smem_ssm (x and the scale table), 3: the table alone
    // Set: the production entry point instead (cuda::qmm_int4 / qmm_fp8 through the library's dispatch).
    std::function<void(const Args&)> library;
    int ring = 0;  // WSM: chunk slots per warp in shared memory after the above (0: weights in registers)
    bool fp8 = false;
    int pers = 0;   // PERS: the grid is min(n-tile groups, this many blocks per SM x SMs)
    int early = 0;  // Args::early: the next launch may start once every block has passed its wait
    bool trace = false;  // kQmvTrace: the timeline of the last timed launch is summarised after its timing
    bool x16 = false;    // kQmvF16Pre: x handed over already in FP16 (the same values, converted once)
};

// The same kernel with quant_qmv.cuh's timeline points (kQmvTrace; same results, a few stores per warp).
template <bool FP8, bool MULTI, int NTB, int D, int MINB, int ABL = 0, bool SSM = false>
Variant traced(const char* name);

// The same variant with the dependents' launch right after the programmatic-launch wait (Args::early).
Variant early(Variant v) {
    v.name += "_early";
    v.early = 1;
    return v;
}

// The same variant given x in FP16 (kQmvF16Pre in its ABL: the staging skips the conversion).
Variant pre(Variant v) {
    v.x16 = true;
    return v;
}

// FP8 and INT4 symmetric with 2-byte scales (INT4) / f32 (FP8); MULTI: the 2..16-row form.
template <bool FP8,
          bool MULTI,
          int NTB,
          int D,
          int MINB,
          int ABL = 0,
          bool SSM = false,
          int MAXM = 8,
          bool WSM = false,
          bool PERS = false>
Variant kernel_variant(const char* name) {
    constexpr int kScaleBytes = FP8 ? 4 : 2;
    auto k = qmm::qmv_kernel<FP8, false, kScaleBytes, NTB, D, MINB, MULTI, ABL, SSM, MAXM, WSM, PERS>;
    check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(qmm::qmv_max_dyn_smem(ABL))),
          "smem attribute");
    constexpr int kExact = qmm::kQmvGeneralLoop | qmm::kQmvScalarStage | qmm::kQmvBlockStage |
                           qmm::kQmvSerialStage | qmm::kQmvPf1 | qmm::kQmvPf2 | qmm::kQmvTrace |
                           qmm::kQmvAccSmem | qmm::kQmvShrFma3 | qmm::kQmvShrFma2;  // A/B, same result
    return {name, (ABL & ~kExact) == 0, k, NTB, 0, SSM ? (MULTI ? 3 : 2) : MULTI ? 0 : 1, {}, WSM ? D : 0, FP8};
}


template <bool FP8, bool MULTI, int NTB, int D, int MINB, int ABL, bool SSM>
Variant traced(const char* name) {
    Variant v = kernel_variant<FP8, MULTI, NTB, D, MINB, ABL | qmm::kQmvTrace, SSM>(name);
    v.name = std::string("trace_") + name;
    v.trace = true;
    return v;
}

// The timeline of one launch (quant_qmv.cuh kQmvTrace: [block][warp][kQmvTraceWords]) in words: when blocks
// entered, passed the wait, started and ended their chunk loops and exited, relative to the first entry; the
// per-warp phase lengths; the spread of a block's warps at the loop's end; blocks per SM. Medians go to
// `metrics` under tag.
void trace_summary(const std::string& tag, const std::vector<unsigned long long>& tr, int blocks,
                   std::string& metrics) {
    constexpr int W = qmm::kQmvWarps, TW = qmm::kQmvTraceWords;
    auto at = [&](int b, int w, int i) { return tr[(static_cast<size_t>(b) * W + w) * TW + i]; };
    unsigned long long t0 = ~0ull;
    for (int b = 0; b < blocks; ++b)
        for (int w = 0; w < W; ++w) t0 = std::min(t0, at(b, w, 0));
    auto pct = [](std::vector<double> v, double p) {
        if (v.empty()) return 0.0;
        std::sort(v.begin(), v.end());
        return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
    };
    // Block points (first warp to enter / pass the wait, last to finish its loop / exit), us after t0.
    std::vector<double> entry, wait, loop_end, exit_, spread;
    // Warp phases (us, from clock64 at each warp's SM clock, scaled by the launch's cycles per ns).
    std::vector<double> prewait, stage, loop, reduce;
    double cyc = 0, ns = 0;
    for (int b = 0; b < blocks; ++b)
        for (int w = 0; w < W; ++w) cyc += static_cast<double>(at(b, w, 9) - at(b, w, 1)),
                                    ns += static_cast<double>(at(b, w, 8) - at(b, w, 0));
    const double ghz = ns > 0 ? cyc / ns : 1.0;
    std::vector<int> per_sm(1024, 0);
    std::vector<double> sm_end(1024, 0.0);
    for (int b = 0; b < blocks; ++b) {
        double e = 1e30, wt = 1e30, le = 0, lmin = 1e30, x = 0;
        for (int w = 0; w < W; ++w) {
            e = std::min(e, (at(b, w, 0) - t0) * 1e-3);
            wt = std::min(wt, (at(b, w, 2) - t0) * 1e-3);
            le = std::max(le, (at(b, w, 6) - t0) * 1e-3);
            lmin = std::min(lmin, (at(b, w, 6) - t0) * 1e-3);
            x = std::max(x, (at(b, w, 8) - t0) * 1e-3);
            prewait.push_back(static_cast<double>(at(b, w, 3) - at(b, w, 1)) / ghz * 1e-3);
            stage.push_back(static_cast<double>(at(b, w, 5) - at(b, w, 3)) / ghz * 1e-3);
            loop.push_back(static_cast<double>(at(b, w, 7) - at(b, w, 5)) / ghz * 1e-3);
            reduce.push_back(static_cast<double>(at(b, w, 9) - at(b, w, 7)) / ghz * 1e-3);
        }
        entry.push_back(e), wait.push_back(wt), loop_end.push_back(le), exit_.push_back(x), spread.push_back(le - lmin);
        const int sm = static_cast<int>(at(b, 0, 10) & 1023);
        ++per_sm[static_cast<size_t>(sm)];
        sm_end[static_cast<size_t>(sm)] = std::max(sm_end[static_cast<size_t>(sm)], x);
    }
    auto line = [&](const char* what, const std::vector<double>& v) {
        std::printf("    %-22s p0 %7.2f  p10 %7.2f  p50 %7.2f  p90 %7.2f  p100 %7.2f\n", what, pct(v, 0), pct(v, 0.1),
                    pct(v, 0.5), pct(v, 0.9), pct(v, 1.0));
    };
    std::printf("  timeline of the last launch (us after its first block entered; SM clock %.2f GHz):\n", ghz);
    line("block entry", entry);
    line("block past wait", wait);
    line("block loop end", loop_end);
    line("block exit", exit_);
    line("warp pre-wait", prewait);
    line("warp staging", stage);
    line("warp chunk loop", loop);
    line("warp reduce+store", reduce);
    line("block loop-end spread", spread);
    std::vector<double> counts, ends;
    for (size_t i = 0; i < per_sm.size(); ++i)
        if (per_sm[i] > 0) counts.push_back(per_sm[i]), ends.push_back(sm_end[i]);
    line("blocks per SM", counts);
    line("SM last exit", ends);
    add_entry(metrics, tag + "_trace_wait_p50_us", pct(wait, 0.5));
    add_entry(metrics, tag + "_trace_exit_p100_us", pct(exit_, 1.0));
    add_entry(metrics, tag + "_trace_stage_p50_us", pct(stage, 0.5));
    add_entry(metrics, tag + "_trace_loop_p50_us", pct(loop, 0.5));
    add_entry(metrics, tag + "_trace_loop_p90_us", pct(loop, 0.9));
    add_entry(metrics, tag + "_trace_reduce_p50_us", pct(reduce, 0.5));
}

// The same kernel with its weights landing in a shared-memory ring of D chunks per warp (quant_qmv.cuh WSM).
template <bool FP8, bool MULTI, int NTB, int D, int MINB, bool SSM = true, int MAXM = 8>
Variant ring_variant(const char* name) {
    return kernel_variant<FP8, MULTI, NTB, D, MINB, 0, SSM, MAXM, true>(name);
}

// Persistent blocks (quant_qmv.cuh PERS): at most `per_sm` blocks per SM, each looping over n-tile groups.
template <bool FP8, bool MULTI, int NTB, int D, int MINB>
Variant pers_variant(const char* name, int per_sm) {
    Variant v = kernel_variant<FP8, MULTI, NTB, D, MINB, 0, false, 8, false, true>(name);
    v.pers = per_sm;
    return v;
}

// A variant timed beside the reference but not bit-comparable with it (another summation order).
Variant inexact(Variant v) {
    v.exact = false;
    return v;
}

// The library's entry point on the same weight (INT4: symmetric g128, F16 scales; FP8: 128 x 128 blocks):
// what qmm.cu dispatches at this M (INT4 since session 9: the qmv kernel at every M <= 16, after its x prep).
// Not bit-comparable.
template <bool FP8>
Variant library(const char* name) {
    auto ws = std::make_shared<gc::QmmWorkspace>();
    return {name, false, nullptr, 1, 0, 0, [ws](const Args& a) {
                if (!ws->partials) {
                    size_t pb = 0;
                    int nc = 0;
                    gc::qmm_workspace_need(248320, 17408, &pb, &nc);
                    check(cudaMalloc(&ws->partials, pb), "cudaMalloc");
                    check(cudaMalloc(&ws->counters, static_cast<size_t>(nc) * 4), "cudaMalloc");
                    check(cudaMemset(ws->counters, 0, static_cast<size_t>(nc) * 4), "memset");
                    ws->partial_bytes = pb, ws->n_counters = nc;
                }
                const Tensor x(const_cast<uint16_t*>(a.x), DType::BF16, grimoire::Device::CUDA, {a.M, a.K});
                Tensor y(a.y, DType::F32, grimoire::Device::CUDA, {a.M, a.N});
                if constexpr (FP8) {
                    gc::Fp8Dev w;
                    w.words = a.words, w.scales = static_cast<const float*>(a.scales);
                    w.N = a.N, w.K = a.K, w.NT = a.NT, w.KC = a.KC, w.bn = a.bn, w.bk = 128;
                    w.SN = (a.N + a.bn - 1) / a.bn, w.SG = a.SG;
                    gc::qmm_fp8(w, x, y, *ws, nullptr);
                } else {
                    gc::Int4Dev w;
                    w.words = a.words, w.scales = a.scales, w.scale_dtype = DType::F16;
                    w.N = a.N, w.K = a.K, w.G = a.G, w.group_size = a.gs, w.NT = a.NT, w.KC = a.KC;
                    gc::qmm_int4(w, x, y, *ws, nullptr);
                }
            }};
}

// The warp-granular stream-K one-row kernel (qmv_streamk.cuh; INT4 g128 symmetric, F16 scales), its grid as
// qmm.cu sizes it, with its own partials and per-n-tile counters. Not bit-comparable (another summation order):
// checked against the reference within a tolerance.
// A variant's own partials (f32) and zeroed per-n-tile counters (up to the lm_head's n-tiles), allocated at
// its first launch; and the device's SM count.
struct OwnWs {
    float* partials = nullptr;
    int* counters = nullptr;
    int sms = 0;
    void ensure(size_t partial_floats) {
        if (partials) return;
        int dev = 0;
        check(cudaGetDevice(&dev), "device");
        check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attribute");
        check(cudaMalloc(&partials, partial_floats * 4), "cudaMalloc");
        check(cudaMalloc(&counters, 248320 / 16 * 4), "cudaMalloc");
        check(cudaMemset(counters, 0, 248320 / 16 * 4), "memset");
    }
};
template <class Kernel>
void allow_qmv_smem(Kernel k) {
    check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(qmm::kQmvMaxSmem)),
          "smem attribute");
}

template <int D, int MINB>
Variant sk_variant(const char* name) {
    auto ws = std::make_shared<OwnWs>();
    auto k = qmm::qmv_sk_kernel<false, 2, 2, D, MINB>;
    allow_qmv_smem(k);
    return {name, false, nullptr, 1, 0, 0, [ws, k](const Args& a0) {
                int dev = 0, sms = 0;
                check(cudaGetDevice(&dev), "device");
                check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attribute");
                ws->ensure(static_cast<size_t>(sms) * MINB * qmm::kQmvWarps * 32);
                Args a = a0;
                a.partials = ws->partials, a.counters = ws->counters;
                const int units = qmm::qmv_sk_units(a, 2);
                const int blocks = std::max(1, std::min(sms * MINB, units / (qmm::kQmvWarps * (D / 2))));
                launch(k, blocks, qmm::qmv_sk_smem(a), a);
            }};
}

// Whether tag contains one of the comma-separated substrings of `list` (--only).
bool matches_any(const std::string& tag, const std::string& list) {
    size_t at = 0;
    while (at <= list.size()) {
        const size_t end = std::min(list.find(',', at), list.size());
        if (end > at && tag.find(list.substr(at, end - at)) != std::string::npos) return true;
        at = end + 1;
    }
    return false;
}

// The trace variants' timeline buffer (Args::partials; the qmv kernel has no other use for it).
unsigned long long* trace_buffer() {
    static unsigned long long* buf = [] {
        unsigned long long* p = nullptr;
        check(cudaMalloc(&p, static_cast<size_t>(248320 / 16) * qmm::kQmvWarps * qmm::kQmvTraceWords * 8),
              "cudaMalloc");
        return p;
    }();
    return buf;
}

void run(const Variant& v, const Args& a0) {
    Args a = a0;
    a.early = v.early;
    if (v.trace) a.partials = reinterpret_cast<float*>(trace_buffer());
    if (v.library) return v.library(a);
    if (v.ntb == 0) return launch(v.kernel, v.blocks, 0, a);
    size_t smem = v.smem == 2   ? qmm::qmv_smem_ssm(a, v.ntb, false, true)
                  : v.smem == 3 ? qmm::qmv_smem_ssm(a, v.ntb, false, false)
                  : v.smem == 1 ? qmm::qmv_smem(a, true)
                                : 0;
    if (v.ring > 0)
        smem = qmm::qmv_ring_offset(a, v.ntb, false, v.smem == 1 || v.smem == 2, v.smem >= 2) +
               qmm::qmv_ring_bytes(v.ring, v.ntb, v.fp8);
    int grid = (a.NT + v.ntb - 1) / v.ntb;
    if (v.pers > 0) {
        int dev = 0, sms = 0, occ = 0;
        check(cudaGetDevice(&dev), "device");
        check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attribute");
        check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.kernel, qmm::kQmvThreads, smem), "occupancy");
        grid = std::min(grid, std::min(occ, v.pers) * sms);
    }
    launch(v.kernel, grid, smem, a);
}

// One format and row count; its first variant is the reference of the exact ones.
struct Group {
    const char* name;
    bool fp8;
    int M;
    std::vector<Variant> vs;
};

std::vector<Group> groups(int sms) {
    using qmm::kQmvNoDequant, qmm::kQmvNoMma, qmm::kQmvNoX, qmm::kQmvBlockStage;
    std::vector<Group> g;
    g.push_back(
        {"int4_m1",
         false,
         1,
         {
             kernel_variant<false, false, 1, 4, 3>(
                 "ntb1_d4"),  // the reference: one tile, per-group scale loads (FP8's path)
             kernel_variant<false, false, 1, 4, 3, 0, true>("ssm_ntb1_d4"),  // qmm.cu: one tile
             kernel_variant<false, false, 2, 2, 3, 0, true>("ssm_ntb2_d2"),  // qmm.cu: two tiles
             kernel_variant<false, false, 2, 2, 3, kQmvBlockStage, true>("ssm_ntb2_d2_bst"),
             kernel_variant<false, false, 1, 8, 3, 0, true>("ssm_ntb1_d8"),
             // The staging before session 12 (table pieces written as they land, then x by registers).
             kernel_variant<false, false, 1, 4, 3, qmm::kQmvSerialStage, true>("ssm_ntb1_d4_ser"),
             kernel_variant<false, false, 2, 2, 3, qmm::kQmvSerialStage, true>("ssm_ntb2_d2_ser"),
             kernel_variant<false, false, 2, 2, 3, kQmvBlockStage | qmm::kQmvSerialStage, true>(
                 "ssm_ntb2_d2_bst_ser"),
             // Weights through a shared-memory ring of D chunks per warp (WSM): deeper than registers.
             ring_variant<false, false, 1, 4, 3>("wsm_ntb1_d4"),
             // Four blocks per SM (64 registers).
             kernel_variant<false, false, 1, 4, 4, 0, true>("ssm_ntb1_d4_mb4"),
             kernel_variant<false, false, 2, 2, 4, 0, true>("ssm_ntb2_d2_mb4"),
             inexact(kernel_variant<false, true, 2, 2, 4, 0, true>("multi_ssm_ntb2_d2_mb4")),
             // The group's x sum from an all-ones mma instead of the staged chunk sums (kQmvMmaSum;
             // another summation order), and the kernel without any x sums (kQmvNoXsum, wrong results).
             inexact(kernel_variant<false, false, 2, 2, 4, qmm::kQmvMmaSum, true>("msum_ssm_ntb2_d2_mb4")),
             inexact(kernel_variant<false, false, 1, 4, 3, qmm::kQmvMmaSum, true>("msum_ssm_ntb1_d4")),
             inexact(kernel_variant<false, false, 2, 2, 3, qmm::kQmvMmaSum, true>("msum_ssm_ntb2_d2")),
             inexact(kernel_variant<false, false, 1, 4, 4, qmm::kQmvMmaSum, true>("msum_ssm_ntb1_d4_mb4")),
             inexact(
                 early(kernel_variant<false, false, 2, 2, 4, qmm::kQmvMmaSum, true>("msum_ssm_ntb2_d2_mb4"))),
             inexact(early(kernel_variant<false, false, 1, 4, 3, qmm::kQmvMmaSum, true>("msum_ssm_ntb1_d4"))),
             inexact(early(kernel_variant<false, false, 2, 2, 3, qmm::kQmvMmaSum, true>("msum_ssm_ntb2_d2"))),
             // The 2..16-row form at three per SM, qmm.cu's one row from 4 to 8 n-tiles per SM before session
             // 17, and the library's dispatch itself.
             inexact(kernel_variant<false, true, 2, 3, 3, 0, true>("multi_ssm_ntb2_d3")),
             inexact(early(kernel_variant<false, true, 2, 3, 3, 0, true>("multi_ssm_ntb2_d3"))),
             library<false>("library"),
             kernel_variant<false, false, 2, 2, 4, qmm::kQmvNoXsum, true>("ablate_noxsum_ntb2_d2_mb4"),
             kernel_variant<false, false, 1, 4, 3, qmm::kQmvNoXsum, true>("ablate_noxsum_ntb1_d4"),
             // L2 prefetch of 4 / 8 / 12 chunks ahead of the register slots (kQmvPf1 / kQmvPf2).
             kernel_variant<false, false, 2, 2, 4, qmm::kQmvPf1, true>("ssm_ntb2_d2_mb4_pf1"),
             kernel_variant<false, false, 2, 2, 4, qmm::kQmvPf2, true>("ssm_ntb2_d2_mb4_pf2"),
             kernel_variant<false, false, 2, 2, 4, qmm::kQmvPf1 | qmm::kQmvPf2, true>("ssm_ntb2_d2_mb4_pf3"),
             kernel_variant<false, false, 1, 4, 3, qmm::kQmvPf1, true>("ssm_ntb1_d4_pf1"),
             kernel_variant<false, false, 1, 4, 3, qmm::kQmvPf2, true>("ssm_ntb1_d4_pf2"),
             kernel_variant<false, false, 2, 2, 3, qmm::kQmvPf1, true>("ssm_ntb2_d2_pf1"),
             kernel_variant<false, false, 2, 2, 3, qmm::kQmvPf2, true>("ssm_ntb2_d2_pf2"),
             kernel_variant<false, false, 1, 4, 3, qmm::kQmvPf1 | qmm::kQmvPf2, true>("ssm_ntb1_d4_pf3"),
             // Warp-granular stream-K (qmv_streamk.cuh): chunks in flight, blocks per SM.
             sk_variant<4, 4>("sk_d4_mb4"),
             sk_variant<6, 4>("sk_d6_mb4"),
             sk_variant<8, 3>("sk_d8_mb3"),  // qmm.cu's (80 registers)
             sk_variant<12, 2>("sk_d12_mb2"),
             sk_variant<16, 2>("sk_d16_mb2"),
             // Persistent blocks (scales with the weights): n-tile groups per block, blocks per SM.
             pers_variant<false, false, 1, 4, 3>("pers_ntb1_d4", 3),
             pers_variant<false, false, 2, 2, 3>("pers_ntb2_d2", 3),
             pers_variant<false, false, 2, 2, 3>("pers_ntb2_d2_x2", 2),
             pers_variant<false, false, 1, 4, 3>("pers_ntb1_d4_x2", 2),
             inexact(pers_variant<false, true, 2, 2, 3>("multi_pers_ntb2_d2", 3)),
             inexact(pers_variant<false, true, 1, 4, 3>("multi_pers_ntb1_d4", 3)),
             // One row on the 2..16-row form (x read from global memory, x sums from the all-ones mma).
             inexact(kernel_variant<false, true, 2, 2, 3, 0, true>("multi_ssm_ntb2_d2")),
             inexact(kernel_variant<false, true, 2, 2, 3, kQmvBlockStage, true>("multi_ssm_ntb2_d2_bst")),
             {"loads_ntb1_d4", false, loads_only<1, 4>, 1, 0, 0, {}},
             {"loads_ntb1_d8", false, loads_only<1, 8>, 1, 0, 0, {}},
             {"loads_ntb1_d6", false, loads_only<1, 6>, 1, 0, 0, {}},
             {"loads_ntb1_d12", false, loads_only<1, 12>, 1, 0, 0, {}},
             {"flat_8xsm", false, flat_read, 0, 8 * sms, 0, {}},
             // Where the one-tile kernel's time goes at depth 4 / 6 / 8 (ablations: wrong results).
             inexact(kernel_variant<false, false, 1, 6, 3, qmm::kQmvMmaSum, true>("msum_ssm_ntb1_d6")),
             inexact(kernel_variant<false, false, 1, 8, 3, qmm::kQmvMmaSum, true>("msum_ssm_ntb1_d8")),
             kernel_variant<false, false, 1, 4, 3, qmm::kQmvMmaSum | kQmvNoDequant | kQmvNoMma, true>(
                 "abl_nocomp_ntb1_d4"),
             kernel_variant<false, false, 1, 8, 3, qmm::kQmvMmaSum | kQmvNoDequant | kQmvNoMma, true>(
                 "abl_nocomp_ntb1_d8"),
             kernel_variant<false, false, 1, 8, 3,
                            qmm::kQmvMmaSum | kQmvNoDequant | kQmvNoMma | kQmvNoX | qmm::kQmvNoFlush, true>(
                 "abl_all_ntb1_d8"),
             kernel_variant<false, false, 1, 8, 3,
                            qmm::kQmvNoXsum | kQmvNoDequant | kQmvNoMma | kQmvNoX | qmm::kQmvNoFlush, true>(
                 "abl_allnosum_ntb1_d8"),
             // Timelines of qmm.cu's one-row forms (kQmvTrace).
             inexact(traced<false, false, 1, 4, 3, qmm::kQmvMmaSum, true>("msum_ssm_ntb1_d4")),
             inexact(traced<false, false, 1, 8, 3, qmm::kQmvMmaSum, true>("msum_ssm_ntb1_d8")),
             inexact(traced<false, false, 2, 2, 4, qmm::kQmvMmaSum, true>("msum_ssm_ntb2_d2_mb4")),
             // Session 38: qmm.cu's one-row forms with the dequant's shifts on the FMA pipe (IMAD.HI)
             // instead of the ALU pipe (kQmvShrFma3: all three, kQmvShrFma2: two); the same bits as
             // their msum_ forms above.
             inexact(kernel_variant<false, false, 2, 2, 4, qmm::kQmvMmaSum | qmm::kQmvShrFma3, true>(
                 "msum_shr3_ssm_ntb2_d2_mb4")),
             inexact(kernel_variant<false, false, 2, 2, 4, qmm::kQmvMmaSum | qmm::kQmvShrFma2, true>(
                 "msum_shr2_ssm_ntb2_d2_mb4")),
             inexact(kernel_variant<false, false, 2, 2, 3, qmm::kQmvMmaSum | qmm::kQmvShrFma3, true>(
                 "msum_shr3_ssm_ntb2_d2")),
             inexact(kernel_variant<false, false, 1, 4, 3, qmm::kQmvMmaSum | qmm::kQmvShrFma3, true>(
                 "msum_shr3_ssm_ntb1_d4")),
             inexact(kernel_variant<false, false, 1, 4, 3, qmm::kQmvMmaSum | qmm::kQmvShrFma2, true>(
                 "msum_shr2_ssm_ntb1_d4")),
             // Session 39: qmm.cu's one-row forms with the mma in FP16 (kQmvF16: x converted while staged,
             // one shift and four lop3 a weight word), as the library launches them (early dependents).
             inexact(early(kernel_variant<false, false, 2, 2, 4, qmm::kQmvMmaSum | qmm::kQmvF16, true>(
                 "msum_f16_ssm_ntb2_d2_mb4"))),
             inexact(early(kernel_variant<false, false, 2, 2, 3, qmm::kQmvMmaSum | qmm::kQmvF16, true>(
                 "msum_f16_ssm_ntb2_d2"))),
             inexact(early(kernel_variant<false, false, 1, 4, 3, qmm::kQmvMmaSum | qmm::kQmvF16, true>(
                 "msum_f16_ssm_ntb1_d4"))),
             // x's group sums by two mma a chunk on the staged x words as an A fragment (kQmvXsumQuad), not
             // four with an all-ones A.
             inexact(early(kernel_variant<false, false, 2, 2, 4, qmm::kQmvMmaSum | qmm::kQmvXsumQuad, true>(
                 "msum_q_ssm_ntb2_d2_mb4"))),
             inexact(early(kernel_variant<false, false, 2, 2, 3, qmm::kQmvMmaSum | qmm::kQmvXsumQuad, true>(
                 "msum_q_ssm_ntb2_d2"))),
             inexact(early(kernel_variant<false, false, 1, 4, 3, qmm::kQmvMmaSum | qmm::kQmvXsumQuad, true>(
                 "msum_q_ssm_ntb1_d4"))),
             // Session 45: the FP16 forms with the library's x sums (kQmvXsumQuad, the sums' mma in FP16
             // too).
             inexact(early(
                 kernel_variant<false, false, 2, 2, 4, qmm::kQmvMmaSum | qmm::kQmvF16 | qmm::kQmvXsumQuad,
                                true>("msum_f16q_ssm_ntb2_d2_mb4"))),
             inexact(early(
                 kernel_variant<false, false, 2, 2, 3, qmm::kQmvMmaSum | qmm::kQmvF16 | qmm::kQmvXsumQuad,
                                true>("msum_f16q_ssm_ntb2_d2"))),
             inexact(early(
                 kernel_variant<false, false, 1, 4, 3, qmm::kQmvMmaSum | qmm::kQmvF16 | qmm::kQmvXsumQuad,
                                true>("msum_f16q_ssm_ntb1_d4"))),
             // The same given x already in FP16 (kQmvF16Pre): the bound on x written in FP16 by its producer.
             pre(inexact(early(
                 kernel_variant<false, false, 2, 2, 4,
                                qmm::kQmvMmaSum | qmm::kQmvF16 | qmm::kQmvXsumQuad | qmm::kQmvF16Pre, true>(
                     "msum_f16q_pre_ssm_ntb2_d2_mb4")))),
             pre(inexact(early(
                 kernel_variant<false, false, 2, 2, 3,
                                qmm::kQmvMmaSum | qmm::kQmvF16 | qmm::kQmvXsumQuad | qmm::kQmvF16Pre, true>(
                     "msum_f16q_pre_ssm_ntb2_d2")))),
             pre(inexact(early(
                 kernel_variant<false, false, 1, 4, 3,
                                qmm::kQmvMmaSum | qmm::kQmvF16 | qmm::kQmvXsumQuad | qmm::kQmvF16Pre, true>(
                     "msum_f16q_pre_ssm_ntb1_d4")))),
             // The same with rows g less 1024 by HSUB2 (kQmvF16Sub: fp32 headroom, two FMA-pipe ops a word).
             inexact(
                 early(kernel_variant<false, false, 2, 2, 4, qmm::kQmvMmaSum | qmm::kQmvF16 | qmm::kQmvF16Sub,
                                      true>("msum_f16s_ssm_ntb2_d2_mb4"))),
             inexact(
                 early(kernel_variant<false, false, 2, 2, 3, qmm::kQmvMmaSum | qmm::kQmvF16 | qmm::kQmvF16Sub,
                                      true>("msum_f16s_ssm_ntb2_d2"))),
             inexact(
                 early(kernel_variant<false, false, 1, 4, 3, qmm::kQmvMmaSum | qmm::kQmvF16 | qmm::kQmvF16Sub,
                                      true>("msum_f16s_ssm_ntb1_d4"))),
         }});
    g.push_back(
        {"int4_m4",
         false,
         4,
         {
             kernel_variant<false, true, 1, 4, 3>("ntb1_d4"),
             kernel_variant<false, true, 2, 3, 3>("ntb2_d3"),
             kernel_variant<false, true, 2, 4, 2>("ntb2_d4_mb2"),
             kernel_variant<false, true, 1, 4, 3, 0, true>("ssm_ntb1_d4"),
             kernel_variant<false, true, 2, 3, 3, 0, true>("ssm_ntb2_d3"),  // qmm.cu's INT4 2..8 rows
             // x's group sums by two mma a chunk on the loaded x words (kQmvXsumQuad), not four.
             inexact(kernel_variant<false, true, 2, 3, 3, qmm::kQmvXsumQuad, true>("sumq_ssm_ntb2_d3")),
             inexact(kernel_variant<false, true, 2, 2, 4, qmm::kQmvXsumQuad, true>("sumq_ssm_ntb2_d2_mb4")),
             inexact(kernel_variant<false, true, 1, 4, 3, qmm::kQmvXsumQuad, true>("sumq_ssm_ntb1_d4")),
             kernel_variant<false, true, 2, 4, 3, 0, true>("ssm_ntb2_d4"),
             kernel_variant<false, true, 2, 3, 4, 0, true>("ssm_ntb2_d3_mb4"),
             kernel_variant<false, true, 2, 2, 4, 0, true>("ssm_ntb2_d2_mb4"),
             // The same on the general loop, as qmm.cu ran one chunk in flight before session 28.
             kernel_variant<false, true, 2, 2, 4, qmm::kQmvGeneralLoop, true>("ssm_ntb2_d2_mb4_genloop"),
         }});
    // 8 rows: the qmv kernel's variants and the library's dispatch.
    g.push_back(
        {"int4_m8",
         false,
         8,
         {
             kernel_variant<false, true, 1, 4, 3, 0, false, 8>("ntb1_d4"),
             kernel_variant<false, true, 2, 3, 3, 0, false, 8>("ntb2_d3"),
             kernel_variant<false, true, 1, 4, 3, 0, true, 8>("ssm_ntb1_d4"),
             kernel_variant<false, true, 2, 3, 3, 0, true, 8>("ssm_ntb2_d3"),
             // x's group sums by two mma a chunk on the loaded x words (kQmvXsumQuad), not four.
             inexact(kernel_variant<false, true, 2, 3, 3, qmm::kQmvXsumQuad, true, 8>("sumq_ssm_ntb2_d3")),
             inexact(
                 kernel_variant<false, true, 2, 2, 4, qmm::kQmvXsumQuad, true, 8>("sumq_ssm_ntb2_d2_mb4")),
             inexact(kernel_variant<false, true, 1, 4, 3, qmm::kQmvXsumQuad, true, 8>("sumq_ssm_ntb1_d4")),
             kernel_variant<false, true, 2, 4, 3, 0, true, 8>("ssm_ntb2_d4"),
             kernel_variant<false, true, 2, 3, 4, 0, true, 8>("ssm_ntb2_d3_mb4"),
             kernel_variant<false, true, 2, 2, 4, 0, true, 8>("ssm_ntb2_d2_mb4"),
             kernel_variant<false, true, 2, 2, 4, qmm::kQmvGeneralLoop, true, 8>("ssm_ntb2_d2_mb4_genloop"),
             library<false>("library"),
         }});
    // 16 rows: each A fragment meets two B operands (MAXM = 16).
    g.push_back(
        {"int4_m16",
         false,
         16,
         {
             kernel_variant<false, true, 1, 4, 3, 0, true, 16>("ssm_ntb1_d4"),
             kernel_variant<false, true, 2, 3, 3, 0, true, 16>("ssm_ntb2_d3"),
             kernel_variant<false, true, 2, 3, 2, 0, true, 16>("ssm_ntb2_d3_mb2"),  // qmm.cu: no spills
             kernel_variant<false, true, 1, 3, 3, 0, true, 16>("ssm_ntb1_d3"),
             kernel_variant<false, true, 1, 2, 3, 0, true, 16>("ssm_ntb1_d2"),
             kernel_variant<false, true, 2, 2, 3, 0, true, 16>("ssm_ntb2_d2"),
             kernel_variant<false, true, 2, 2, 3, qmm::kQmvGeneralLoop, true, 16>("ssm_ntb2_d2_genloop"),
             library<false>("library"),
             // The accumulators in shared memory (kQmvAccSmem, session 34): 80 registers, a third block per
             // SM.
             kernel_variant<false, true, 2, 3, 3, qmm::kQmvAccSmem, true, 16>("acs_ntb2_d3_mb3"),
             kernel_variant<false, true, 2, 4, 3, qmm::kQmvAccSmem, true, 16>("acs_ntb2_d4_mb3"),
             kernel_variant<false, true, 2, 3, 2, qmm::kQmvAccSmem, true, 16>("acs_ntb2_d3_mb2"),
             kernel_variant<false, true, 1, 4, 3, qmm::kQmvAccSmem, true, 16>("acs_ntb1_d4_mb3"),
             kernel_variant<false, true, 1, 3, 4, qmm::kQmvAccSmem, true, 16>("acs_ntb1_d3_mb4"),
             // Session 38: qmm.cu's sixteen-row forms with the dequant's shifts on the FMA pipe (kQmvShrFma3
             // / kQmvShrFma2; the same bits).
             kernel_variant<false, true, 2, 3, 3, qmm::kQmvAccSmem | qmm::kQmvShrFma3, true, 16>(
                 "acs_shr3_ntb2_d3_mb3"),
             kernel_variant<false, true, 2, 3, 3, qmm::kQmvAccSmem | qmm::kQmvShrFma2, true, 16>(
                 "acs_shr2_ntb2_d3_mb3"),
             kernel_variant<false, true, 2, 2, 3, qmm::kQmvShrFma3, true, 16>("ssm_shr3_ntb2_d2"),
             kernel_variant<false, true, 1, 2, 3, qmm::kQmvShrFma3, true, 16>("ssm_shr3_ntb1_d2"),
             kernel_variant<false, true, 1, 2, 3, qmm::kQmvShrFma2, true, 16>("ssm_shr2_ntb1_d2"),
             // Session 39: x's group sums by two mma per B operand on its x words as loaded (kQmvXsumQuad),
             // not one per k-tile with x as A (four register moves a k-tile), on qmm.cu's sixteen-row forms.
             inexact(kernel_variant<false, true, 2, 3, 3, qmm::kQmvAccSmem | qmm::kQmvXsumQuad, true, 16>(
                 "sumq_acs_ntb2_d3_mb3")),
             inexact(kernel_variant<false, true, 2, 3, 2, qmm::kQmvXsumQuad, true, 16>("sumq_ntb2_d3_mb2")),
             inexact(kernel_variant<false, true, 2, 2, 3, qmm::kQmvXsumQuad, true, 16>("sumq_ntb2_d2")),
             inexact(kernel_variant<false, true, 1, 2, 3, qmm::kQmvXsumQuad, true, 16>("sumq_ntb1_d2")),
             // ncu's source page (session 34): a quarter of the two-per-SM form's stall samples sit on the
             // first dequant shift of each chunk, waiting for its weights. Deeper register slots at two per
             // SM (the accumulators in shared memory make room) and an L2 window beyond them.
             kernel_variant<false, true, 2, 4, 2, qmm::kQmvAccSmem, true, 16>("acs_ntb2_d4_mb2"),
             kernel_variant<false, true, 2, 5, 2, qmm::kQmvAccSmem, true, 16>("acs_ntb2_d5_mb2"),
             kernel_variant<false, true, 2, 3, 2, qmm::kQmvPf1, true, 16>("pf1_ntb2_d3_mb2"),
             kernel_variant<false, true, 2, 3, 2, qmm::kQmvPf2, true, 16>("pf2_ntb2_d3_mb2"),
             kernel_variant<false, true, 2, 3, 3, qmm::kQmvAccSmem | qmm::kQmvPf1, true, 16>(
                 "acs_pf1_ntb2_d3_mb3"),
             kernel_variant<false, true, 2, 3, 3, qmm::kQmvAccSmem | qmm::kQmvPf2, true, 16>(
                 "acs_pf2_ntb2_d3_mb3"),
             // Where sixteen rows lose their time on qmm.cu's wide-weight form (ablations: wrong results): no
             // x loads (B fragments constant), no mma, no dequant, and none of the three.
             kernel_variant<false, true, 2, 3, 2, kQmvNoX, true, 16>("abl_nox_ntb2_d3_mb2"),
             kernel_variant<false, true, 2, 3, 2, kQmvNoMma, true, 16>("abl_nomma_ntb2_d3_mb2"),
             kernel_variant<false, true, 2, 3, 2, kQmvNoDequant, true, 16>("abl_nodeq_ntb2_d3_mb2"),
             kernel_variant<false, true, 2, 3, 2, kQmvNoX | kQmvNoMma | kQmvNoDequant, true, 16>(
                 "abl_nocomp_ntb2_d3_mb2"),
             kernel_variant<false, true, 2, 2, 3, kQmvNoX, true, 16>("abl_nox_ntb2_d2"),
             // Session 41: qmm.cu's sixteen-row forms without x's group sums (kQmvNoXsum: no all-ones mma, no
             // shuffles at the flush), what sums made once per launch could save at most.
             kernel_variant<false, true, 2, 3, 3, qmm::kQmvAccSmem | qmm::kQmvXsumQuad | qmm::kQmvNoXsum,
                            true, 16>("abl_noxsum_acs_ntb2_d3_mb3"),
             kernel_variant<false, true, 2, 3, 2, qmm::kQmvXsumQuad | qmm::kQmvNoXsum, true, 16>(
                 "abl_noxsum_ntb2_d3_mb2"),
             kernel_variant<false, true, 2, 2, 3, qmm::kQmvXsumQuad | qmm::kQmvNoXsum, true, 16>(
                 "abl_noxsum_ntb2_d2"),
             kernel_variant<false, true, 1, 2, 3, qmm::kQmvXsumQuad | qmm::kQmvNoXsum, true, 16>(
                 "abl_noxsum_ntb1_d2"),
             // The zero point subtracted from each weight in BF16 (kQmvSubZ): no all-ones mma for x's group
             // sums (a third of the mma at sixteen rows), four more BF16 subtractions per 8 weights.
             inexact(kernel_variant<false, true, 2, 3, 2, qmm::kQmvSubZ, true, 16>("subz_ntb2_d3_mb2")),
             inexact(kernel_variant<false, true, 2, 2, 3, qmm::kQmvSubZ, true, 16>("subz_ntb2_d2")),
             inexact(kernel_variant<false, true, 1, 2, 3, qmm::kQmvSubZ, true, 16>("subz_ntb1_d2")),
             inexact(kernel_variant<false, true, 2, 2, 2, qmm::kQmvSubZ, true, 16>("subz_ntb2_d2_mb2")),
             // The x sums by one all-ones mma per B operand (kQmvSumCols, the form before session 19) against
             // the single mma with x as A (the committed form, above).
             inexact(kernel_variant<false, true, 2, 3, 2, qmm::kQmvSumCols, true, 16>("sumcols_ntb2_d3_mb2")),
             inexact(kernel_variant<false, true, 2, 2, 3, qmm::kQmvSumCols, true, 16>("sumcols_ntb2_d2")),
             // The weights through a per-warp shared-memory ring (WSM: cp.async, deeper than the registers
             // allow at sixteen rows, where qmm.cu's form keeps two chunks of two tiles at two blocks per
             // SM).
             inexact(ring_variant<false, true, 2, 4, 2, true, 16>("wsm_ntb2_d4_mb2")),
             inexact(ring_variant<false, true, 2, 6, 2, true, 16>("wsm_ntb2_d6_mb2")),
             inexact(ring_variant<false, true, 2, 4, 3, true, 16>("wsm_ntb2_d4_mb3")),
             inexact(ring_variant<false, true, 1, 8, 3, true, 16>("wsm_ntb1_d8_mb3")),
             inexact(ring_variant<false, true, 1, 6, 4, true, 16>("wsm_ntb1_d6_mb4")),
             inexact(ring_variant<false, true, 2, 8, 2, true, 16>("wsm_ntb2_d8_mb2")),
         }});
    // FP8 at 4, 8 and 16 rows: the qmv kernel (per-group scale loads, as qmm.cu launches FP8) against the
    // library's dispatch (the Hopper kernel but at 2..4 rows on the narrower shapes).
    g.push_back({"fp8_m4",
                 true,
                 4,
                 {
                     kernel_variant<true, true, 1, 4, 3>("ntb1_d4"),
                     kernel_variant<true, true, 1, 4, 3, qmm::kQmvGeneralLoop>("ntb1_d4_genloop"),
                     kernel_variant<true, true, 2, 3, 3>("ntb2_d3"),
                     kernel_variant<true, true, 1, 4, 3, 0, true>("ssm_ntb1_d4"),
                     library<true>("library"),
                 }});
    g.push_back({"fp8_m8",
                 true,
                 8,
                 {
                     kernel_variant<true, true, 1, 4, 3>("ntb1_d4"),
                     kernel_variant<true, true, 1, 4, 3, qmm::kQmvGeneralLoop>("ntb1_d4_genloop"),
                     kernel_variant<true, true, 2, 3, 3>("ntb2_d3"),
                     library<true>("library"),
                 }});
    g.push_back({"fp8_m16",
                 true,
                 16,
                 {
                     kernel_variant<true, true, 1, 4, 3, 0, false, 16>("ntb1_d4"),
                     kernel_variant<true, true, 1, 4, 3, qmm::kQmvGeneralLoop, false, 16>("ntb1_d4_genloop"),
                     kernel_variant<true, true, 2, 2, 3, 0, false, 16>("ntb2_d2"),
                     kernel_variant<true, true, 1, 2, 3, 0, false, 16>("ntb1_d2"),
                     library<true>("library"),
                     // The accumulators in shared memory (kQmvAccSmem, session 34): two tiles at 80
                     // registers, one tile at four per SM or deeper.
                     kernel_variant<true, true, 2, 3, 3, qmm::kQmvAccSmem, false, 16>("acs_ntb2_d3_mb3"),
                     kernel_variant<true, true, 2, 2, 3, qmm::kQmvAccSmem, false, 16>("acs_ntb2_d2_mb3"),
                     kernel_variant<true, true, 1, 4, 4, qmm::kQmvAccSmem, false, 16>("acs_ntb1_d4_mb4"),
                     kernel_variant<true, true, 1, 6, 3, qmm::kQmvAccSmem, false, 16>("acs_ntb1_d6_mb3"),
                     kernel_variant<true, true, 1, 4, 3, qmm::kQmvAccSmem, false, 16>("acs_ntb1_d4_mb3"),
                 }});
    g.push_back(
        {"fp8_m1",
         true,
         1,
         {
             kernel_variant<true, false, 1, 4, 3>(
                 "ntb1_d4"),  // qmm.cu's FP8 configurations (2 chunks in flight)
             kernel_variant<true, false, 1, 4, 3, qmm::kQmvSerialStage>("ntb1_d4_ser"),  // x as before
             kernel_variant<true, false, 1, 4, 3, qmm::kQmvPf1>("ntb1_d4_pf1"),
             kernel_variant<true, false, 1, 4, 3, qmm::kQmvPf2>("ntb1_d4_pf2"),
             pers_variant<true, false, 1, 4, 3>("pers_ntb1_d4", 3),
             pers_variant<true, false, 2, 3, 3>("pers_ntb2_d3", 3),
             inexact(pers_variant<true, true, 2, 3, 3>("multi_pers_ntb2_d3", 3)),
             kernel_variant<true, false, 2, 3, 3>("ntb2_d3"),
             kernel_variant<true, false, 1, 6, 3>("ntb1_d6"),
             kernel_variant<true, false, 1, 4, 3, 0, true>("ssm_ntb1_d4"),
             kernel_variant<true, false, 2, 3, 3, 0, true>("ssm_ntb2_d3"),
             kernel_variant<true, false, 1, 8, 3, 0, true>("ssm_ntb1_d8"),
             ring_variant<true, false, 1, 4, 3, false>("wsm_ntb1_d4"),
             inexact(kernel_variant<true, true, 1, 4, 3>("multi_ntb1_d4")),
             inexact(kernel_variant<true, true, 2, 3, 3>("multi_ntb2_d3")),  // qmm.cu: 4+ n-tiles per SM
             inexact(kernel_variant<true, true, 2, 3, 3, qmm::kQmvGeneralLoop>("multi_ntb2_d3_genloop")),
             // The same with the early dependents' launch (qmm.cu's default on the 2..16-row form), and
             // the library's dispatch.
             inexact(early(kernel_variant<true, true, 1, 4, 3>("multi_ntb1_d4"))),
             inexact(early(kernel_variant<true, true, 2, 3, 3>("multi_ntb2_d3"))),
             library<true>("library"),
             // Session 44: the staged one-row forms with the mma in FP16 (kQmvF16: x converted while
             // staged, E4M3 to FP16 by one cvt a pair), beside the library's staged form as it launches it.
             early(kernel_variant<true, false, 1, 4, 3>("ntb1_d4")),
             inexact(early(kernel_variant<true, false, 1, 4, 3, qmm::kQmvF16>("f16_ntb1_d4"))),
             inexact(early(kernel_variant<true, false, 1, 6, 3, qmm::kQmvF16>("f16_ntb1_d6"))),
             inexact(early(kernel_variant<true, false, 1, 4, 4, qmm::kQmvF16>("f16_ntb1_d4_mb4"))),
             inexact(early(kernel_variant<true, false, 2, 3, 3, qmm::kQmvF16>("f16_ntb2_d3"))),
             inexact(early(kernel_variant<true, false, 2, 2, 4, qmm::kQmvF16>("f16_ntb2_d2_mb4"))),
             // Given x already in FP16 (kQmvF16Pre), session 45.
             pre(inexact(early(
                 kernel_variant<true, false, 1, 4, 3, qmm::kQmvF16 | qmm::kQmvF16Pre>("f16_pre_ntb1_d4")))),
             pre(inexact(early(kernel_variant<true, false, 2, 2, 4, qmm::kQmvF16 | qmm::kQmvF16Pre>(
                 "f16_pre_ntb2_d2_mb4")))),
             kernel_variant<true, false, 1, 4, 3, kQmvNoDequant>("ablate_ntb1_nodequant"),
             kernel_variant<true, false, 1, 4, 3, kQmvNoMma>("ablate_ntb1_nomma"),
             kernel_variant<true, false, 1, 4, 3, kQmvNoX>("ablate_ntb1_nox"),
             traced<true, false, 1, 4, 3>("ntb1_d4"),
             // Session 44: the library's staged form traced as it launches (early dependents): blocks per SM.
             early(traced<true, false, 1, 4, 3>("ntb1_d4")),
             {"loads_ntb1_d2", false, loads_only<1, 2, 2>, 1, 0, 0, {}},
             {"loads_ntb1_d4", false, loads_only<1, 4, 2>, 1, 0, 0, {}},
             {"flat_8xsm", false, flat_read, 0, 8 * sms, 0, {}},
         }});
    return g;
}

}  // namespace

static int run_bench(int argc, char** argv) {
    std::string out_path, commit = "unknown", only, shape_list, command = "bench_qmv_variants";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        command += " " + a;
        if (i + 1 < argc && (a == "--out" || a == "--commit" || a == "--only" || a == "--shapes")) {
            const std::string v = argv[++i];
            command += " " + v;
            (a == "--out" ? out_path : a == "--commit" ? commit : a == "--only" ? only : shape_list) = v;
        } else {
            std::fprintf(stderr,
                         "usage: bench_qmv_variants [--out FILE] [--commit SHA] [--only SUBSTRING,...] "
                         "[--shapes NAME:N:K,...]\n");
            return 2;
        }
    }
    int sms = 132;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const double bw = copy_bandwidth();
    std::printf("copy bandwidth (read+write): %.0f GB/s\n", bw / 1e9);

    struct Shape {
        std::string name;
        int N, K;
    };
    std::vector<Shape> shapes = {{"gate_up", 34816, 5120}, {"down", 5120, 17408},  {"q_gate", 12288, 5120},
                                 {"gdn_qkv", 10240, 5120}, {"o_proj", 5120, 6144}, {"lm_head", 248320, 5120}};
    if (!shape_list.empty()) {  // NAME:N:K,... (N and K whole 16 / 64 multiples, within the buffers below)
        shapes.clear();
        size_t at = 0;
        while (at < shape_list.size()) {
            const size_t end = std::min(shape_list.find(',', at), shape_list.size());
            const std::string item = shape_list.substr(at, end - at);
            const size_t c1 = item.find(':'), c2 = item.find(':', c1 + 1);
            if (c1 == std::string::npos || c2 == std::string::npos) {
                std::fprintf(stderr, "bench_qmv_variants: --shapes item '%s' is not NAME:N:K\n",
                             item.c_str());
                return 2;
            }
            const Shape sh{item.substr(0, c1), std::atoi(item.substr(c1 + 1, c2 - c1 - 1).c_str()),
                           std::atoi(item.substr(c2 + 1).c_str())};
            if (sh.N <= 0 || sh.N > 248320 || sh.N % 16 || sh.K <= 0 || sh.K > 17408 || sh.K % 128) {
                std::fprintf(
                    stderr, "bench_qmv_variants: shape '%s': N in 16..248320 (x16), K in 128..17408 (x128)\n",
                    item.c_str());
                return 2;
            }
            shapes.push_back(sh);
            at = end + 1;
        }
    }
    const std::vector<Group> gs = groups(sms);

    constexpr int kMaxN = 248320, kMaxK = 17408, kRows = 16;
    uint16_t *x = nullptr, *x16 = nullptr;  // x16: x in FP16 for the kQmvF16Pre variants
    float *y = nullptr, *yref = nullptr;
    check(cudaMalloc(&x, static_cast<size_t>(kRows) * kMaxK * 2), "cudaMalloc");
    check(cudaMalloc(&x16, static_cast<size_t>(kRows) * kMaxK * 2), "cudaMalloc");
    check(cudaMalloc(&y, static_cast<size_t>(kRows) * kMaxN * 4), "cudaMalloc");
    check(cudaMalloc(&yref, static_cast<size_t>(kRows) * kMaxN * 4), "cudaMalloc");
    std::vector<float> h(static_cast<size_t>(kRows) * kMaxN), href(h.size());
    std::string metrics, ratios;
    int mismatches = 0;
    for (const Group& grp : gs) {
        for (const Shape& sh : shapes) {
            const int NT = (sh.N + 15) / 16, KC = (sh.K + 63) / 64, G = (sh.K + 127) / 128;
            // INT4: [NT*KC][32 lanes][4 words] + F16 scales [G][NT*16]; FP8: twice the words, f32
            // [N/128][K/128].
            const size_t nw = static_cast<size_t>(NT) * KC * (grp.fp8 ? 256 : 128);
            const size_t ns =
                grp.fp8 ? static_cast<size_t>((sh.N + 127) / 128) * G : static_cast<size_t>(G) * NT * 16;
            const size_t one = nw * 4 + ns * (grp.fp8 ? 4 : 2);
            const int copies = static_cast<int>((400ull << 20) / one + 1);
            std::vector<uint32_t*> W(static_cast<size_t>(copies));
            std::vector<void*> S(static_cast<size_t>(copies));
            for (size_t c = 0; c < W.size(); ++c) {
                check(cudaMalloc(&W[c], nw * 4), "cudaMalloc");
                check(cudaMalloc(&S[c], ns * (grp.fp8 ? 4 : 2)), "cudaMalloc");
                // FP8 bytes with bit 6 clear: finite values of moderate size (no NaN encodings). Scales: FP8
                // in [0.005, 0.02], INT4 F16 in [0.0005, 0.0015]; x BF16 in [-1, 1].
                gc::random_bits(W[c], static_cast<int64_t>(nw), 100 + c, grp.fp8 ? 0xBFBFBFBFu : ~0u,
                                nullptr);
                gc::random_fill(S[c], grp.fp8 ? DType::F32 : DType::F16, static_cast<int64_t>(ns), 200 + c,
                                grp.fp8 ? 0.0075f : 0.0005f, grp.fp8 ? 0.0125f : 0.001f, nullptr);
            }
            // x [M, K] random in [-1, 1], as qmm.cu hands it to the kernel when it is BF16 with whole chunks (every
            // shape here).
            const int ldx = sh.K;
            gc::random_fill(x, DType::BF16, static_cast<int64_t>(grp.M) * ldx, 7, 1.0f, 0.0f, nullptr);
            {
                // |x| <= 1: FP16 holds every BF16 value at or above 2^-14 exactly, the smaller ones to 2^-24.
                const Tensor xb(x, DType::BF16, grimoire::Device::CUDA, {grp.M, ldx});
                Tensor xh(x16, DType::F16, grimoire::Device::CUDA, {grp.M, ldx});
                gc::convert(xb, xh, nullptr);
            }
            check(cudaDeviceSynchronize(), "fill");
            Args a{};
            a.x = x, a.ldx = ldx, a.ydt = grimoire::cuda::kF32, a.M = grp.M, a.gpc = 1;
            a.N = sh.N, a.K = sh.K, a.NT = NT, a.KC = KC, a.G = G, a.gs = 128;
            if (grp.fp8)
                a.sdt = grimoire::cuda::kF32, a.ssz = 4, a.bn = 128, a.SG = G;
            else
                a.sdt = grimoire::cuda::kF16, a.ssz = 2, a.NP = NT * 16;
            const size_t ny = static_cast<size_t>(grp.M) * static_cast<size_t>(sh.N);
            for (size_t vi = 0; vi < grp.vs.size(); ++vi) {
                const Variant& v = grp.vs[vi];
                const std::string tag = std::string(grp.name) + "_" + sh.name + "_" + v.name;
                if (vi != 0 && !only.empty() && !matches_any(tag, only)) continue;
                a.words = W[0], a.scales = S[0], a.y = vi == 0 ? yref : y, a.x = v.x16 ? x16 : x;
                check(cudaMemset(a.y, 0xFF, ny * 4), "memset");
                run(v, a);
                check(cudaDeviceSynchronize(), tag.c_str());
                bool same = true;
                double rel = 0.0;  // inexact variants that compute the result: max |y - ref| / max |ref|
                const bool computes = v.exact || v.library || v.name.rfind("sk_", 0) == 0 ||
                                      v.name.rfind("bal_", 0) == 0 || v.name.rfind("msum_", 0) == 0 ||
                                      v.name.rfind("subz_", 0) == 0 || v.name.rfind("sumcols_", 0) == 0 ||
                                      v.name.rfind("sumq_", 0) == 0 || v.name.rfind("trace_", 0) == 0 ||
                                      v.name.rfind("wsm_", 0) == 0 || v.name.rfind("f16_", 0) == 0;
                if (vi != 0 && computes) {
                    check(cudaMemcpy(h.data(), y, ny * 4, cudaMemcpyDeviceToHost), "copy");
                    check(cudaMemcpy(href.data(), yref, ny * 4, cudaMemcpyDeviceToHost), "copy");
                    double dmax = 0.0, rmax = 0.0;
                    for (size_t i = 0; i < ny; ++i) {
                        same = same && h[i] == href[i];
                        dmax = std::max(dmax, static_cast<double>(std::fabs(h[i] - href[i])));
                        rmax = std::max(rmax, static_cast<double>(std::fabs(href[i])));
                    }
                    if (!std::isfinite(dmax)) dmax = 1e30;
                    rel = rmax > 0 ? dmax / rmax : dmax;
                    if (v.exact) mismatches += same ? 0 : 1;
                    // Another summation order of the same fp32 sums: far inside 1e-4 of the largest output.
                    if (!v.exact && rel > 1e-4) ++mismatches;
                }
                // Timed launches write y (rotating weights): yref keeps the reference's result on W[0].
                a.y = y;
                const int reps = std::max(40, 3 * copies);
                auto rotate = [&](int i) {
                    a.words = W[static_cast<size_t>(i % copies)],
                    a.scales = S[static_cast<size_t>(i % copies)];
                };
                const double us = 1e3 * time_ms(
                                            [&](int i) {
                                                rotate(i);
                                                run(v, a);
                                            },
                                            reps);
                const double r = static_cast<double>(one) / (us * 1e-6) / bw;
                char note[64] = "";
                if (vi != 0 && v.exact) std::snprintf(note, sizeof note, same ? "  (= reference)" : "  MISMATCH");
                else if (vi != 0 && computes)
                    std::snprintf(note, sizeof note, "  (max err %.1e of max |y|%s)", rel, rel > 1e-4 ? " BAD" : "");
                std::printf("%-8s %-8s %-24s %9.2f us  %.3f of copy%s\n", grp.name, sh.name.c_str(), v.name.c_str(),
                            us, r, note);
                std::fflush(stdout);
                add_entry(metrics, tag + "_us", us);
                add_entry(ratios, tag + "_bw", r);
                if (v.trace) {
                    check(cudaDeviceSynchronize(), "trace");
                    const int blocks = (a.NT + v.ntb - 1) / v.ntb;
                    std::vector<unsigned long long> tr(static_cast<size_t>(blocks) * qmm::kQmvWarps *
                                                       qmm::kQmvTraceWords);
                    check(cudaMemcpy(tr.data(), trace_buffer(), tr.size() * 8, cudaMemcpyDeviceToHost), "copy");
                    trace_summary(tag, tr, blocks, metrics);
                }
            }
            for (size_t c = 0; c < W.size(); ++c) cudaFree(W[c]), cudaFree(S[c]);
        }
    }
    if (!out_path.empty()) write_record_text(out_path, commit, command, bw, metrics, ratios);
    if (mismatches) std::printf("%d exact variants differ from the reference\n", mismatches);
    return mismatches ? 1 : 0;
}

int main(int argc, char** argv) {
    try {
        return run_bench(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_qmv_variants: %s\n", e.what());
        return 1;
    }
}
