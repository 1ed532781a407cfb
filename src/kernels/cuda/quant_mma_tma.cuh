// The Hopper variant of the M = 1..16 quantized-weight kernel (quant_mma.cuh has the format math, the tile
// layout and the stream-K split it shares): one block per SM, a producer warp that streams the weights into a
// shared-memory ring with bulk asynchronous copies (TMA: cp.async.bulk + mbarrier), and 15 consumer warps
// that only dequantize and multiply. qmm.cu launches it for FP8 weights, where it measured faster on the H200
// at almost every shape and M; INT4 stays on the cp.async kernel (docs/BENCHMARKS.md, session 5).
//   * Column block = 15 warps x 4 (INT4) / 2 (FP8) n-tiles, so one 64-channel chunk of it is 30 KB of
//     contiguous tiles: one bulk copy per step, six steps in flight. Bulk copies cost the copy engine per
//     copy (measured on the H200: 4 KB copies cap one SM at ~16 GB/s whatever the ring depth, 16 KB copies
//     reach the DRAM limit, each 128-byte to 1 KB side copy added ~0.2 us per step), so nothing small goes
//     through it.
//   * The small per-step inputs go around the ring: the consumers load their x fragments (L1 / L2 resident,
//     every warp of the SM reads the same) and their rows' scales / zero points into registers one step ahead
//     (raw bits, converted at the flush, so nothing waits on the load early); the producer's lanes prefetch
//     each step's scale lines into L2 when they issue its weights, a ring ahead of their use.
//   * A consumer copies its weights from the stage into registers and releases the stage at once.
//   * full[s] completes when the bytes of stage s landed; empty[s] when every consumer warp has read it.
//   * PDL: the weights of the first ring stages do not depend on the previous kernel, so the producer issues
//     them before griddepcontrol.wait.
#pragma once
#include "kernels/cuda/quant_mma.cuh"

namespace grimoire::cuda::qmm {

#ifndef GRIMOIRE_TMA_CONSUMERS
#define GRIMOIRE_TMA_CONSUMERS 15
#endif
constexpr int kTmaConsumers = GRIMOIRE_TMA_CONSUMERS;
constexpr int kTmaThreads = 32 * (kTmaConsumers + 1);
// n-tiles per column block: 4 (INT4) / 2 (FP8) per consumer warp, 2 KB of a chunk per warp
constexpr int tma_ntb(bool fp8) {
    return kTmaConsumers * (fp8 ? 2 : 4);
}
constexpr int kTmaMaxStages = 16;
constexpr size_t kTmaSmem = 200 * 1024;

// Ring stage size and count for the TMA kernel (Args::stage, nstage); returns the dynamic shared memory.
inline size_t plan_stage_tma(Args& a, bool fp8) {
    a.stage = tma_ntb(fp8) * 32 * 16 * vec(fp8);
    a.nstage = static_cast<int>(kTmaSmem / static_cast<size_t>(a.stage));
    if (a.nstage > kTmaMaxStages) a.nstage = kTmaMaxStages;
    return static_cast<size_t>(a.nstage) * a.stage;
}

// The global timer (ns) and an acquire load at GPU scope: the bounded waits of persistent kernels
// (mlp_fp8.cu, bench/gpu/probe_decode_chain.cu), which trap after a timeout instead of hanging the card.
__device__ __forceinline__ uint64_t globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(uint64_t* b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
    asm volatile(
        "{\n .reg .pred p;\n"
        "WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT_%=;\n}" ::"r"(smem_addr(b)),
        "r"(parity)
        : "memory");
}
// mbar_wait bounded: a trap after timeout_ns (a producer and consumers that disagree on the slots would otherwise
// hang the card; the launch then reports the failure). The slow path stays out of line.
__device__ __forceinline__ bool mbar_try(uint64_t* b, unsigned parity) {
    uint32_t ok;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(smem_addr(b)), "r"(parity)
        : "memory");
    return ok != 0;
}
__device__ __noinline__ void mbar_wait_bounded_slow(uint64_t* b, unsigned parity, uint64_t timeout_ns) {
    const uint64_t t0 = globaltimer_ns();
    while (!mbar_try(b, parity))
        if (globaltimer_ns() - t0 > timeout_ns) __trap();
}
__device__ __forceinline__ void mbar_wait_bounded(uint64_t* b, unsigned parity, uint64_t timeout_ns) {
    if (!mbar_try(b, parity)) mbar_wait_bounded_slow(b, parity, timeout_ns);
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* b) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(b))
        : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kTmaConsumers * 32) : "memory");
}
__device__ __forceinline__ uint32_t ldg_u32(const uint16_t* p) {
    return __ldg(reinterpret_cast<const unsigned*>(p));
}
#endif

// What a consumer lane needs besides the weights for one step, loaded a step ahead.
template <int MT, int NTW>
struct StepIn {
    uint32_t b[MT][4][2];  // B fragments of x: token tile m, k-tile kt, (channels 2t.., 2t + 8..)
    uint32_t s[NTW][2];    // GK = 0: scale bits (F16 / BF16 / F32) of rows g / g + 8 of each n-tile
    uint32_t z[NTW][2];    // GK = 0 asymmetric: their zero points
};

template <bool FP8, int MT, bool ASYM, int GK>
__global__ void __launch_bounds__(kTmaThreads, 1) qmm_tma_kernel(const Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int VEC = vec(FP8);
    constexpr int NTB = tma_ntb(FP8), CB = NTB * 16;  // n-tiles / features per column block
    constexpr int NTW = NTB / kTmaConsumers;
    static_assert(NTW >= 1 && NTB % kTmaConsumers == 0, "n-tiles per consumer warp");
    extern __shared__ __align__(128) uint4 smem_u4[];
    __shared__ uint64_t full[kTmaMaxStages], empty[kTmaMaxStages];
    __shared__ int last_block;
    __shared__ int slot_table[kSlotTable];

    char* ring = reinterpret_cast<char*>(smem_u4);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int B = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int w0 = range_start(b, a.W, B), w1 = range_start(b + 1, a.W, B);
    const int KC = a.KC, S = a.nstage;
    const int cpg = a.G <= 1 ? KC : max(1, a.gs / 64);  // GK = 0: chunks per scale group
    if (a.early) asm volatile("griddepcontrol.launch_dependents;");
    QMM_TRACE(0);
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            mbar_init(&full[s], 1);  // the producer's expect_tx arrival; the bytes complete the phase
            mbar_init(&empty[s], kTmaConsumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();

    if (warp == kTmaConsumers) {
        // ---------------- producer warp: lane 0 the weights, the lanes the L2 prefetch of the scale lines.
        const char* wbase = reinterpret_cast<const char*>(a.words);
        constexpr int tile_bytes = 32 * 16 * VEC;
        auto issue = [&](int w, int slot) {
            const int cb = w / KC, c = w - cb * KC;
            if (lane == 0) {
                const int nt0 = cb * NTB, nts = min(NTB, a.NT - nt0);
                const unsigned bytes = static_cast<unsigned>(nts * tile_bytes);
                mbar_arrive_tx(&full[slot], bytes);
                bulk_load(ring + static_cast<size_t>(slot) * a.stage,
                          wbase + tile_index(nt0, c, a.NT, KC) * tile_bytes, bytes, &full[slot]);
            }
            const int n = min(cb * CB + lane * (CB / 32), a.N - 1);  // one row per lane: every 128-byte line
            int ig;
            if constexpr (GK == 0)
                ig = a.G <= 1 ? 0 : c / cpg;
            else
                ig = c * a.gpc;
            if constexpr (FP8) {
                prefetch_l2(static_cast<const float*>(a.scales) + static_cast<int64_t>(n / a.bn) * a.SG +
                            min(ig, a.G - 1));
            } else {
                for (int grp = 0; grp < a.gpc; ++grp) {
                    const int64_t gi = min(ig + grp, a.G - 1);
                    prefetch_l2(static_cast<const char*>(a.scales) + (gi * a.NP + n) * a.ssz);
                    if constexpr (ASYM) prefetch_l2(a.zeros + gi * a.NP + n);
                }
            }
        };
        const int n_pre = min(S, w1 - w0);
        for (int i = 0; i < n_pre; ++i) issue(w0 + i, i);
        asm volatile("griddepcontrol.wait;" ::: "memory");
        int slot = 0;
        unsigned round = 1;
        for (int w = w0 + n_pre; w < w1; ++w) {
            mbar_wait(&empty[slot], (round - 1) & 1);
            issue(w, slot);
            if (++slot == S) slot = 0, ++round;
        }
        return;
    }

    // ---------------- consumer warps
    asm volatile("griddepcontrol.wait;" ::: "memory");
    QMM_TRACE(1);
    const int g = lane >> 2, t = lane & 3;
    const int ntw = warp * NTW;  // first n-tile of this warp within the column block
    bool row_ok[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) row_ok[m] = m * 8 + g < a.M;

    // Scale / zero point of row n (clamped: rows past N are computed, never stored) in group gi: the slow
    // path for groups of 16 / 32 channels.
    auto scale_at = [&](int n, int gi) -> float {
        n = min(n, a.N - 1);
        if constexpr (FP8)
            return __ldg(static_cast<const float*>(a.scales) + static_cast<int64_t>(n / a.bn) * a.SG + gi);
        else
            return ld(a.scales, a.sdt, static_cast<int64_t>(gi) * a.NP + n);
    };
    auto zero_at = [&](int n, int gi) -> uint32_t {
        return (0x4300u + __ldg(a.zeros + static_cast<int64_t>(gi) * a.NP + min(n, a.N - 1))) * 0x10001u;
    };

    // The next step to load inputs for, walked incrementally (no divisions per step): column block ncb, chunk
    // nc, scale group ngi with nrem chunks left in it; srow: this lane's scale rows in ncb.
    int ncb = w0 / KC, nc = w0 - ncb * KC;
    int ngi = a.G <= 1 ? 0 : nc / cpg, nrem = cpg - nc % cpg;
    int64_t srow[NTW][2];
    auto set_rows = [&]() {
#pragma unroll
        for (int j = 0; j < NTW; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int n = min((ncb * NTB + ntw + j) * 16 + g + 8 * h, a.N - 1);
                srow[j][h] = FP8 ? static_cast<int64_t>(n / a.bn) * a.SG : n;
            }
    };
    set_rows();
    const uint16_t* xrow[MT];  // this lane's x row (token m * 8 + g), channel 2t
#pragma unroll
    for (int m = 0; m < MT; ++m)
        xrow[m] = a.x + static_cast<int64_t>(row_ok[m] ? m * 8 + g : 0) * a.ldx + 2 * t;
    using In = StepIn<MT, NTW>;
    // Raw scale bits stay raw until the flush: converting here would wait for the load right away.
    auto load_next = [&](In& in) {
        const int k0 = nc * 64;
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                const int k = k0 + kt * 16 + 2 * t;  // channel pairs never straddle ldx (a multiple of 8)
                in.b[m][kt][0] = row_ok[m] && k < a.ldx ? ldg_u32(xrow[m] + k0 + kt * 16) : 0u;
                in.b[m][kt][1] = row_ok[m] && k + 8 < a.ldx ? ldg_u32(xrow[m] + k0 + kt * 16 + 8) : 0u;
            }
        if constexpr (GK == 0) {
            const int gi = min(ngi, a.G - 1);
#pragma unroll
            for (int j = 0; j < NTW; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    if constexpr (FP8) {
                        in.s[j][h] = __ldg(reinterpret_cast<const unsigned*>(a.scales) + srow[j][h] + gi);
                    } else {
                        const int64_t i = static_cast<int64_t>(gi) * a.NP + srow[j][h];
                        in.s[j][h] = a.ssz == 4
                                         ? __ldg(reinterpret_cast<const unsigned*>(a.scales) + i)
                                         : __ldg(reinterpret_cast<const unsigned short*>(a.scales) + i);
                        if constexpr (ASYM) in.z[j][h] = __ldg(a.zeros + i);
                    }
                }
        }
        ++nc;
        if (--nrem == 0) ++ngi, nrem = cpg;
        if (nc == KC) {
            nc = 0, ++ncb, ngi = 0, nrem = cpg;
            set_rows();
        }
    };
    In cur_in, next_in;
    load_next(next_in);

    int slot = 0;
    unsigned round = 0;
    int w = w0;
    while (w < w1) {
        const int nb = w / KC;
        const int seg_begin = w, seg_end = min(w1, (nb + 1) * KC);
        const int nt0 = nb * NTB + ntw;

        float acc[NTW][MT][4], cur[NTW][MT][4];
        zero_acc(acc, cur);

        int c = w - nb * KC;
        int rem = cpg - c % cpg;

        for (; w < seg_end; ++w, ++c) {
            cur_in = next_in;
            if (w + 1 < w1) load_next(next_in);
            mbar_wait(&full[slot], round & 1);
            if (w == w0) QMM_TRACE(2);
            const char* st = ring + static_cast<size_t>(slot) * a.stage;
            uint4 q[NTW][VEC];
#pragma unroll
            for (int j = 0; j < NTW; ++j)
#pragma unroll
                for (int v = 0; v < VEC; ++v)
                    q[j][v] = *reinterpret_cast<const uint4*>(st + (((ntw + j) * 32 + lane) * VEC + v) * 16);
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[slot]);  // the weights are in registers: the stage can refill
            if (++slot == S) slot = 0, ++round;

            // acc += s * cur with the scales of rows g (lo) and g + 8 (hi); cur restarts for the next group.
            auto apply = [&](const float(&sc)[NTW][2]) {
#pragma unroll
                for (int j = 0; j < NTW; ++j)
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        acc[j][m][0] += cur[j][m][0] * sc[j][0];
                        acc[j][m][1] += cur[j][m][1] * sc[j][0];
                        acc[j][m][2] += cur[j][m][2] * sc[j][1];
                        acc[j][m][3] += cur[j][m][3] * sc[j][1];
                        cur[j][m][0] = cur[j][m][1] = cur[j][m][2] = cur[j][m][3] = 0.0f;
                    }
            };
            // Groups of 16 / 32 channels (several per chunk): scales and zero points read where they are
            // used.
            uint32_t zsmall[NTW][2];
            auto small_group = [&](int grp, bool scales) {
                const int gi = min(c * a.gpc + grp, a.G - 1);
                float sc[NTW][2];
#pragma unroll
                for (int j = 0; j < NTW; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int n = (nt0 + j) * 16 + g + 8 * h;
                        if (scales)
                            sc[j][h] = scale_at(n, gi);
                        else
                            zsmall[j][h] = ASYM ? zero_at(n, gi) : 0x43084308u;
                    }
                if (scales) apply(sc);
            };
            if constexpr (GK > 0) small_group(0, false);

#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                if constexpr (GK > 0) {
                    if (kt > 0 && kt % GK == 0) small_group(kt / GK, false);
                }
#pragma unroll
                for (int j = 0; j < NTW; ++j) {
                    const uint32_t zx = GK > 0 ? zsmall[j][0]
                                        : ASYM ? (0x4300u + cur_in.z[j][0]) * 0x10001u
                                               : 0x43084308u;
                    const uint32_t zy = GK > 0 ? zsmall[j][1]
                                        : ASYM ? (0x4300u + cur_in.z[j][1]) * 0x10001u
                                               : 0x43084308u;
                    uint32_t a0, a1, a2, a3;
                    a_fragment<FP8>(q[j], kt, zx, zy, a0, a1, a2, a3);
#pragma unroll
                    for (int m = 0; m < MT; ++m)
                        mma_bf16(cur[j][m], a0, a1, a2, a3, cur_in.b[m][kt][0], cur_in.b[m][kt][1]);
                }
                if constexpr (GK > 0) {
                    if ((kt + 1) % GK == 0) small_group(kt / GK, true);
                }
            }
            if constexpr (GK == 0) {
                if (--rem == 0 || w + 1 == seg_end) {  // group end, or the segment ends inside the group
                    float sc[NTW][2];
#pragma unroll
                    for (int j = 0; j < NTW; ++j)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const uint32_t v = cur_in.s[j][h];
                            sc[j][h] = FP8 || a.sdt == kF32 ? __uint_as_float(v)
                                       : a.sdt == kF16
                                           ? __half2float(__ushort_as_half(static_cast<unsigned short>(v)))
                                           : __uint_as_float(v << 16);
                        }
                    apply(sc);
                    rem = cpg;
                }
            }
        }

        if (w == w1) {
            QMM_TRACE(3);
            asm volatile("griddepcontrol.launch_dependents;");
        }
        // ---- this column block: written directly when this grid block did all of it, else a partial.
        const bool whole = seg_begin == nb * KC && seg_end == (nb + 1) * KC;
        store_acc<CB>(a, acc, nb, ntw, whole, seg_begin == w0 ? 0 : 1);
        if (whole) continue;
        // Over the consumer warps only: the producer keeps streaming the next steps meanwhile.
        finish_split<CB>(a, nb, last_block, slot_table, kTmaConsumers * 32, [] { consumers_sync(); });
    }
    QMM_TRACE(4);
#endif
}

}  // namespace grimoire::cuda::qmm
