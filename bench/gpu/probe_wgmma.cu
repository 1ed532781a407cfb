// Probe of the Hopper warpgroup mma the sixteen-row INT4 / FP8 kernel would use (docs/BENCHMARKS.md session 20:
// the mma.sync form is latency-bound at a quarter occupancy): wgmma.mma_async m64n16k16 with BF16 inputs, the A
// operand (64 weight rows x 16 k) in registers in the mma.sync m16n8k16 fragment layout (warp w of the
// warpgroup holds rows 16w..16w+15) and the B operand (16 tokens x 16 k, K contiguous) in shared memory without
// swizzle, read through a matrix descriptor. It checks, against a host reference over four k-tiles (one 64-channel
// chunk), which shared-memory layout of B's 8 x 16-byte core matrices goes with which descriptor field (leading /
// stride byte offset), and the D fragment layout (d0..d7 as two m16n8 C fragments side by side).
//
//   probe_wgmma        (prints one line per layout and descriptor assignment; exit 0 when one of them matches)
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr int kRows = 64, kTok = 16, kK = 64;  // one warpgroup's rows, the tokens, one chunk of channels

// B's core matrix (token group nn of 8, k group kk of 8) sits at byte nn * sn + kk * sk of the tile; the descriptor
// carries lbo / sbo (bytes). D = sum over the chunk's four k-tiles of A_kt B_kt^T.
__global__ void probe(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d, int sk, int sn, int lbo, int sbo) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(1024) __nv_bfloat16 bs[kTok * kK];
    const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    // B into the core-matrix layout: 16 tokens x 8 k groups of 16 bytes, one per thread.
    {
        const int tok = tid >> 3, kg = tid & 7;  // 128 threads = 16 tokens x 8 groups
        const uint4 v = *reinterpret_cast<const uint4*>(b + tok * kK + kg * 8);
        const int off = (tok >> 3) * sn + kg * sk + (tok & 7) * 16;
        *reinterpret_cast<uint4*>(reinterpret_cast<char*>(bs) + off) = v;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes seen by the async proxy
    __syncthreads();
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(bs));
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    auto pair = [&](int row, int k) {
        return *reinterpret_cast<const uint32_t*>(a + row * kK + k);
    };
    for (int kt = 0; kt < 4; ++kt) {
        const int r0 = 16 * warp + g, r1 = r0 + 8, k0 = kt * 16 + 2 * t;
        const uint32_t a0 = pair(r0, k0), a1 = pair(r1, k0), a2 = pair(r0, k0 + 8), a3 = pair(r1, k0 + 8);
        const uint64_t addr = base + kt * 2 * sk;  // k-tile kt: k groups 2kt, 2kt + 1
        const uint64_t desc = ((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
                              (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, "
            "%11}, %12, p, 1, 1, 0;\n}\n"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]),
              "+f"(acc[7])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(kt > 0 ? 1 : 0));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    }
    // D: two m16n8 C fragments side by side (tokens 0-7, then 8-15).
    const int r0 = 16 * warp + g, r1 = r0 + 8;
    for (int h = 0; h < 2; ++h) {
        d[r0 * kTok + 8 * h + 2 * t] = acc[4 * h + 0], d[r0 * kTok + 8 * h + 2 * t + 1] = acc[4 * h + 1];
        d[r1 * kTok + 8 * h + 2 * t] = acc[4 * h + 2], d[r1 * kTok + 8 * h + 2 * t + 1] = acc[4 * h + 3];
    }
#endif
}

bool ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) std::fprintf(stderr, "probe_wgmma: %s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

}  // namespace

int main() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<__nv_bfloat16> ha(kRows * kK), hb(kTok * kK);
    for (auto& v : ha) v = __float2bfloat16(u(rng));
    for (auto& v : hb) v = __float2bfloat16(u(rng));
    std::vector<double> ref(kRows * kTok, 0.0);
    for (int r = 0; r < kRows; ++r)
        for (int n = 0; n < kTok; ++n)
            for (int k = 0; k < kK; ++k)
                ref[r * kTok + n] += static_cast<double>(__bfloat162float(ha[r * kK + k])) * __bfloat162float(hb[n * kK + k]);
    __nv_bfloat16 *da = nullptr, *db = nullptr;
    float* dd = nullptr;
    if (!ok(cudaMalloc(&da, ha.size() * 2), "malloc") || !ok(cudaMalloc(&db, hb.size() * 2), "malloc") ||
        !ok(cudaMalloc(&dd, ref.size() * 4), "malloc"))
        return 1;
    cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice);
    struct Cfg {
        const char* name;
        int sk, sn, lbo, sbo;
    };
    // Layout 1: a token group's eight k groups contiguous (k-adjacent cores 128 B apart, token groups 1 KB apart);
    // layout 2: the two token groups of one k group contiguous (token-adjacent 128 B, k-adjacent 256 B).
    const Cfg cfgs[] = {{"k-contiguous, lbo = k step, sbo = token step", 128, 1024, 128, 1024},
                        {"k-contiguous, lbo = token step, sbo = k step", 128, 1024, 1024, 128},
                        {"token-contiguous, lbo = k step, sbo = token step", 256, 128, 256, 128},
                        {"token-contiguous, lbo = token step, sbo = k step", 256, 128, 128, 256}};
    int matches = 0;
    std::vector<float> hd(ref.size());
    for (const Cfg& c : cfgs) {
        cudaMemset(dd, 0xFF, ref.size() * 4);
        probe<<<1, 128>>>(da, db, dd, c.sk, c.sn, c.lbo, c.sbo);
        if (!ok(cudaDeviceSynchronize(), c.name)) return 1;
        cudaMemcpy(hd.data(), dd, hd.size() * 4, cudaMemcpyDeviceToHost);
        double worst = 0.0;
        for (size_t i = 0; i < hd.size(); ++i) worst = std::fmax(worst, std::fabs(hd[i] - ref[i]));
        const bool match = worst < 1e-3;  // fp32 sums of 64 exact BF16 products of magnitude < 1
        matches += match;
        std::printf("%-52s max |d - ref| %.3g  %s\n", c.name, worst, match ? "MATCH" : "no");
    }
    cudaFree(da), cudaFree(db), cudaFree(dd);
    return matches > 0 ? 0 : 1;
}
