// Prototype (bench only, sm_90a) of the sixteen-row INT4 kernel on the warpgroup mma, timed against the kernel
// qmm.cu launches at 9..16 rows (quant_qmv.cuh, mma.sync, two n-tiles per warp and K split over 8 warps):
//   * a block is one warpgroup; warp w owns n-tile 4 * block + w over all of K (no reduction across warps);
//   * each chunk's weights go from HBM to registers (16 bytes per lane, four chunks in flight), are dequantized to
//     128 + q in the mma.sync A fragment layout (exact) and fed to wgmma.mma_async m64n16k16 as its register A;
//   * x (16 tokens x 64 channels per chunk) lands by 4-byte cp.async in a four-stage shared ring, already in the
//     wgmma B core-matrix layout with the weights' chunk permutation (the two pairs of k-tile kt for lane slot t
//     are channels 16 t + 4 kt + {0, 1} and + {2, 3}); the descriptor steps are bench/gpu/probe_wgmma.cu's;
//   * x's group sums come from a second wgmma per k-tile with an all-ones A, landing in D's own layout, and the
//     zero point (symmetric: 128 + 8) is subtracted per group before the scale, as in the qmv kernel.
// INT4 symmetric g128, F16 scales, M = 16. Checked against the committed kernel (another fp32 summation order:
// within 1e-4 of the largest output).
//
//   bench_qmv_wgmma [--shapes NAME:N:K,...]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant_qmv.cuh"

namespace gc = grimoire::cuda;
namespace qmm = grimoire::cuda::qmm;
using grimoire::DType;
using grimoire::bench::check;
using grimoire::bench::copy_bandwidth;
using grimoire::bench::time_ms;
using qmm::Args;

namespace {

constexpr int kStages = 4;        // x ring: chunks
constexpr int kStageBytes = 2048;  // 16 tokens x 64 channels BF16
constexpr int kSlots = 4;          // weight chunks in flight per warp (registers)

__device__ __forceinline__ void cp_async4z(void* smem, const void* gmem, bool full) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem), "r"(full ? 4 : 0));
}

// D (8 f32) += A (registers, mma.sync fragment of the warp's 16 rows) x B (descriptor), or = when !acc.
__device__ __forceinline__ void wg_mma(float (&d)[8], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint64_t desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "
        "%12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(acc));
}

// Stage layout: [kt 4][kk 2][token group 2][8 tokens][16 bytes]: the two token groups of a core column 128 B
// apart (stride byte offset), the two k halves 256 B apart (leading byte offset), k-tile kt at 512 kt.
__device__ __forceinline__ uint64_t b_desc(uint32_t stage_addr, int kt) {
    const uint64_t addr = stage_addr + 512u * kt;
    return ((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(256 >> 4) << 16) | (static_cast<uint64_t>(128 >> 4) << 32);
}

// SCHED 0: every chunk drained before the next (the first version). SCHED 1: A double-buffered across
// `wgmma.wait_group 1`, each scale group's sums in their own buffer by group parity, flushed one group late once
// wait_group 1 has retired them, the x ring one stage longer so a stage is refilled only after the mma that read
// it retired (one block barrier per chunk); ptxas serializes it (C7514: the flush reads accumulators inside a
// pipeline stage). SCHED 2: one drain per scale group, at its end, before the flush; the next chunk's A is
// dequantized while the current chunk's mma run (A double-buffered; wait_group 1 before overwriting the buffer of
// a chunk of the same group).
template <int SCHED>
__global__ void __launch_bounds__(128) wg_kernel(const Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr bool kPipe = SCHED == 1;
    constexpr int S = SCHED > 0 ? kStages + 1 : kStages;  // x ring stages
    __shared__ __align__(1024) unsigned char ring[S * kStageBytes];
    const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int nt = min(static_cast<int>(blockIdx.x) * 4 + warp, a.NT - 1);
    const int KC = a.KC;
    const uint4* wp = reinterpret_cast<const uint4*>(a.words) + (static_cast<int64_t>(nt) * 32 + lane);
    const int64_t wstride = static_cast<int64_t>(a.NT) * 32;  // uint4 per chunk row of tiles
    uint4 wq[kSlots];
    int lc = 0;
    auto load = [&](int s) {
        if (lc < KC) wq[s] = qmm::ld_stream(wp), wp += wstride;
        ++lc;
    };
#pragma unroll
    for (int s = 0; s < kSlots; ++s) load(s);
    // Rows g / g + 8 of the warp's n-tile: their F16 scale of each group.
    const __half* sc = static_cast<const __half*>(a.scales);
    const int row_lo = min(nt * 16 + g, a.N - 1), row_hi = min(nt * 16 + g + 8, a.N - 1);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    // x of chunk c into stage c % S: thread (token n, slot t, half h) copies channels 16 t + 8 h + 2 q.
    const uint32_t ring_addr = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
    const int xn = tid >> 3, xt = (tid >> 1) & 3, xh = tid & 1;
    const bool xrow = xn < a.M;
    const uint16_t* xsrc = a.x + static_cast<int64_t>(xrow ? xn : 0) * a.ldx + 16 * xt + 8 * xh;
    auto stage_x = [&](int c) {
        if (c < KC) {
            unsigned char* st = ring + (c % S) * kStageBytes;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int p = 4 * xh + q, kt = p >> 1, kk = p & 1;
                cp_async4z(st + kt * 512 + kk * 256 + (xn >> 3) * 128 + (xn & 7) * 16 + xt * 4,
                           xsrc + static_cast<int64_t>(c) * 64 + 2 * q, xrow);
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    constexpr int kAhead = kStages - 1;  // x chunks in flight ahead of the one consumed
#pragma unroll
    for (int c = 0; c < kAhead; ++c) stage_x(c);
    constexpr int NB = kPipe ? 2 : 1;  // sum buffers (group parity)
    float acc[8], cur[NB][8], xs[NB][8], s_lo[NB], s_hi[NB];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        acc[e] = 0.0f;
#pragma unroll
        for (int b = 0; b < NB; ++b) cur[b][e] = 0.0f, xs[b][e] = 0.0f;
    }
#pragma unroll
    for (int b = 0; b < NB; ++b) s_lo[b] = s_hi[b] = 0.0f;
    constexpr uint32_t kOnes = 0x3F803F80u;
    auto flush = [&](int b) {  // (sum - 136 * x sum) * scale; d[e]: row g (e & 2 == 0) / g + 8
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = fmaf(fmaf(-136.0f, xs[b][e], cur[b][e]), (e & 2) ? s_hi[b] : s_lo[b], acc[e]);
    };
    uint32_t af[SCHED > 0 ? 2 : 1][4][4];
    auto dequant = [&](int slot, int buf) {
#pragma unroll
        for (int kt = 0; kt < 4; ++kt)
            qmm::a_fragment_int4_raw(wq[slot], kt, af[buf][kt][0], af[buf][kt][1], af[buf][kt][2], af[buf][kt][3]);
    };
    if constexpr (SCHED == 2) {
        dequant(0, 0);
        load(0);  // chunk kSlots into slot 0
        for (int cb = 0; cb < KC; cb += kSlots) {
#pragma unroll
            for (int s = 0; s < kSlots; ++s) {
                const int c = cb + s, ab = s & 1;
                if (c >= KC) break;
                if ((c & 1) == 0) {  // the group's scales, used at its flush
                    const int grp = c >> 1;
                    s_lo[0] = __half2float(sc[static_cast<int64_t>(grp) * a.NP + row_lo]);
                    s_hi[0] = __half2float(sc[static_cast<int64_t>(grp) * a.NP + row_hi]);
                }
                asm volatile("cp.async.wait_group %0;" ::"n"(kAhead - 1) : "memory");  // chunk c's x landed
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                __syncthreads();
                stage_x(c + kAhead);  // into chunk c - 2's stage: retired by the drain at its group's end
                const uint32_t stage = ring_addr + (c % S) * kStageBytes;
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
                for (int kt = 0; kt < 4; ++kt) {
                    const uint64_t desc = b_desc(stage, kt);
                    const int keep = (c & 1) || kt > 0;
                    wg_mma(cur[0], af[ab][kt][0], af[ab][kt][1], af[ab][kt][2], af[ab][kt][3], desc, keep);
                    wg_mma(xs[0], kOnes, kOnes, kOnes, kOnes, desc, keep);
                }
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                if (c + 1 < KC) {  // the next chunk's A while these run
                    if (c & 1) asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // chunk c - 1's A free
                    dequant((s + 1) % kSlots, ab ^ 1);
                    load((s + 1) % kSlots);
                }
                if (c & 1) {
                    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
                    flush(0);
                }
            }
        }
    }
    for (int cb = 0; SCHED < 2 && cb < KC; cb += kSlots) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const int c = cb + s;
            if (c >= KC) break;
            const int gb = kPipe ? (s >> 1) & 1 : 0;  // the group's sum buffer (kSlots = 4: two groups per step)
            const int ab = kPipe ? s & 1 : 0;  // the chunk's A buffer
            if ((c & 1) == 0) {  // the group's scales, used at its flush
                const int grp = c >> 1;
                s_lo[gb] = __half2float(sc[static_cast<int64_t>(grp) * a.NP + row_lo]);
                s_hi[gb] = __half2float(sc[static_cast<int64_t>(grp) * a.NP + row_hi]);
            }
            if constexpr (kPipe) {
                asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // chunks <= c - 2 retired
                if ((c & 1) && c >= 3) flush(gb ^ 1);  // the previous group, retired with chunk c - 2
            }
            dequant(s, ab);
            load(s);  // chunk c + kSlots into the consumed slot
            asm volatile("cp.async.wait_group %0;" ::"n"(kAhead - 1) : "memory");  // chunk c's x landed
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncthreads();
            if constexpr (kPipe) stage_x(c + kAhead);  // into chunk c - 2's stage, whose mma retired
            const uint32_t stage = ring_addr + (c % S) * kStageBytes;
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                const uint64_t desc = b_desc(stage, kt);
                const int keep = (c & 1) || kt > 0;  // a group's first k-tile starts its sums
                wg_mma(cur[gb], af[ab][kt][0], af[ab][kt][1], af[ab][kt][2], af[ab][kt][3], desc, keep);
                wg_mma(xs[gb], kOnes, kOnes, kOnes, kOnes, desc, keep);
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            if constexpr (!kPipe) {
                asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // A registers and the stage are free
                __syncthreads();  // every warp is done with stage c % S before it is refilled
                stage_x(c + kAhead);
                if (c & 1) flush(0);
            }
        }
    }
    if constexpr (kPipe) {
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        flush(1);  // the last group (K a multiple of 256 channels: an even number of groups, so parity 1)
    }
    asm volatile("griddepcontrol.launch_dependents;");
    // D: tokens 8 h + 2 t + (e & 1) for e = 4 h + ..., rows g / g + 8.
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const int tok = 8 * (e >> 2) + 2 * t + (e & 1), n = nt * 16 + g + ((e & 2) ? 8 : 0);
        if (tok < a.M && n < a.N && static_cast<int>(blockIdx.x) * 4 + warp < a.NT)
            static_cast<float*>(a.y)[static_cast<int64_t>(tok) * a.N + n] = acc[e];
    }
#endif
}

// The committed sixteen-row form (qmm.cu: two n-tiles per block of 8 warps, three chunks, two blocks per SM).
constexpr auto kRef = qmm::qmv_kernel<false, false, 2, 2, 3, 2, true, 0, true, 16>;

void launch(void (*k)(Args), int grid, int threads, size_t smem, const Args& a) {
    gc::launch_pdl_if(true, k, dim3(static_cast<unsigned>(grid)), dim3(static_cast<unsigned>(threads)), smem, nullptr, a);
    check(cudaGetLastError(), "launch");
}

}  // namespace

int main(int argc, char** argv) {
    struct Shape {
        std::string name;
        int N, K;
    };
    std::vector<Shape> shapes = {{"gate_up", 34816, 5120}, {"down", 5120, 17408}, {"q_gate", 12288, 5120},
                                 {"gdn_qkv", 10240, 5120}, {"o_proj", 5120, 6144}, {"lm_head", 248320, 5120}};
    if (argc == 3 && std::string(argv[1]) == "--shapes") {
        shapes.clear();
        std::string list = argv[2];
        size_t at = 0;
        while (at < list.size()) {
            const size_t end = std::min(list.find(',', at), list.size());
            const std::string item = list.substr(at, end - at);
            const size_t c1 = item.find(':'), c2 = item.find(':', c1 + 1);
            shapes.push_back({item.substr(0, c1), std::atoi(item.substr(c1 + 1, c2 - c1 - 1).c_str()),
                              std::atoi(item.substr(c2 + 1).c_str())});
            at = end + 1;
        }
    }
    check(cudaFuncSetAttribute(kRef, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(qmm::kQmvMaxSmem)),
          "attribute");
    const double bw = copy_bandwidth();
    std::printf("copy bandwidth (read+write): %.0f GB/s\n", bw / 1e9);
    constexpr int M = 16;
    uint16_t* x = nullptr;
    float *y = nullptr, *yref = nullptr;
    check(cudaMalloc(&x, static_cast<size_t>(M) * 17408 * 2), "malloc");
    check(cudaMalloc(&y, static_cast<size_t>(M) * 248320 * 4), "malloc");
    check(cudaMalloc(&yref, static_cast<size_t>(M) * 248320 * 4), "malloc");
    int bad = 0;
    for (const Shape& sh : shapes) {
        const int NT = (sh.N + 15) / 16, KC = (sh.K + 63) / 64, G = (sh.K + 127) / 128;
        if (KC % 4 != 0) {
            std::fprintf(stderr, "bench_qmv_wgmma: K must be a multiple of 256 (%s)\n", sh.name.c_str());
            return 2;
        }
        const size_t nw = static_cast<size_t>(NT) * KC * 128, ns = static_cast<size_t>(G) * NT * 16;
        const size_t one = nw * 4 + ns * 2;
        const int copies = static_cast<int>((400ull << 20) / one + 1);
        std::vector<uint32_t*> W(static_cast<size_t>(copies));
        std::vector<void*> S(static_cast<size_t>(copies));
        for (int c = 0; c < copies; ++c) {
            check(cudaMalloc(&W[static_cast<size_t>(c)], nw * 4), "malloc");
            check(cudaMalloc(&S[static_cast<size_t>(c)], ns * 2), "malloc");
            gc::random_bits(W[static_cast<size_t>(c)], static_cast<int64_t>(nw), 100 + c, ~0u, nullptr);
            gc::random_fill(S[static_cast<size_t>(c)], DType::F16, static_cast<int64_t>(ns), 200 + c, 0.0005f, 0.001f,
                            nullptr);
        }
        gc::random_fill(x, DType::BF16, static_cast<int64_t>(M) * sh.K, 7, 1.0f, 0.0f, nullptr);
        check(cudaDeviceSynchronize(), "fill");
        Args a{};
        a.x = x, a.ldx = sh.K, a.ydt = gc::kF32, a.M = M, a.gpc = 1;
        a.N = sh.N, a.K = sh.K, a.NT = NT, a.KC = KC, a.G = G, a.gs = 128;
        a.sdt = gc::kF16, a.ssz = 2, a.NP = NT * 16;
        const size_t ref_smem = qmm::qmv_smem_ssm(a, 2, false, false);
        auto run_ref = [&](const Args& b) { launch(kRef, (NT + 1) / 2, qmm::kQmvThreads, ref_smem, b); };
        auto run_wg = [&](const Args& b) { launch(wg_kernel<0>, (NT + 3) / 4, 128, 0, b); };
        auto run_wp = [&](const Args& b) { launch(wg_kernel<1>, (NT + 3) / 4, 128, 0, b); };
        auto run_w2 = [&](const Args& b) { launch(wg_kernel<2>, (NT + 3) / 4, 128, 0, b); };
        a.words = W[0], a.scales = S[0];
        a.y = yref;
        run_ref(a);
        a.y = y;
        std::vector<float> h(static_cast<size_t>(M) * sh.N), hr(h.size());
        cudaMemcpy(hr.data(), yref, hr.size() * 4, cudaMemcpyDeviceToHost);
        auto err = [&](auto run) {
            check(cudaMemset(y, 0xFF, static_cast<size_t>(M) * sh.N * 4), "memset");
            run(a);
            check(cudaDeviceSynchronize(), "check run");
            cudaMemcpy(h.data(), y, h.size() * 4, cudaMemcpyDeviceToHost);
            double dmax = 0, rmax = 0;
            for (size_t i = 0; i < h.size(); ++i) {
                const double d = std::isfinite(h[i]) ? std::fabs(static_cast<double>(h[i]) - hr[i]) : 1e30;
                dmax = std::max(dmax, d), rmax = std::max(rmax, std::fabs(static_cast<double>(hr[i])));
            }
            const double rel = rmax > 0 ? dmax / rmax : dmax;
            if (rel > 1e-4) ++bad;
            return rel;
        };
        const double rel = err(run_wg), relp = err(run_wp), rel2 = err(run_w2);
        const int reps = std::max(40, 3 * copies);
        auto timed = [&](auto run) {
            return 1e3 * time_ms(
                             [&](int i) {
                                 Args b = a;
                                 b.words = W[static_cast<size_t>(i % copies)], b.scales = S[static_cast<size_t>(i % copies)];
                                 run(b);
                             },
                             reps);
        };
        const double t_ref = timed(run_ref), t_wg = timed(run_wg), t_wp = timed(run_wp), t_w2 = timed(run_w2);
        std::printf("%-8s %6d x %-6d M 16: committed %8.2f us (%.3f of copy); wgmma schedule 0 %8.2f us (%.3f) err "
                    "%.1e, 1 %8.2f us (%.3f) err %.1e, 2 %8.2f us (%.3f) err %.1e%s\n",
                    sh.name.c_str(), sh.N, sh.K, t_ref, one / (t_ref * 1e-6) / bw, t_wg, one / (t_wg * 1e-6) / bw, rel,
                    t_wp, one / (t_wp * 1e-6) / bw, relp, t_w2, one / (t_w2 * 1e-6) / bw, rel2,
                    rel > 1e-4 || relp > 1e-4 || rel2 > 1e-4 ? " BAD" : "");
        std::fflush(stdout);
        for (size_t c = 0; c < W.size(); ++c) cudaFree(W[c]), cudaFree(S[c]);
    }
    return bad ? 1 : 0;
}
