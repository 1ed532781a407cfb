// The small ops of one Qwen3.5-27B decode step (1 and 4 tokens) at their real shapes, each timed inside a CUDA
// graph as the decode step runs them (no host launch cost, only the in-graph gap between kernels):
//   bench_decode_ops [--ctx 512] [--reps 50] [--only gemv|gdn|attn]
// Every op is recorded `reps` times back to back into one graph (graphs off in the backend, so the ops launch
// on its stream while it is being captured); the graph is replayed 3 times untimed and 5 times timed; the
// figure is microseconds per op. Bytes are what the op must read and write at least, for the GB/s column.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "bench_util.h"
#include "core/error.h"
#include "kernels/cuda/kernels.h"

using namespace grimoire;

namespace {

double graph_us(CudaBackend& be, int reps, const std::function<void()>& op) {
    be.synchronize();
    be.reset_scratch();
    return 1e3 * bench::time_graph_ms([&](int, cudaStream_t) { op(); }, reps, be.stream());
}

void report(const std::string& what, double us, double bytes) {
    std::printf("%-52s %8.2f us", what.c_str(), us);
    if (bytes > 0) std::printf("  %7.0f GB/s", bytes / (us * 1e-6) / 1e9);
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    int64_t ctx = 512;
    int reps = 50;
    std::string only;
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::string(argv[i]) == "--ctx") ctx = std::stoll(argv[++i]);
        else if (std::string(argv[i]) == "--reps") reps = std::stoi(argv[++i]);
        else if (std::string(argv[i]) == "--only") only = argv[++i];
    }
    auto want = [&](const char* what) { return only.empty() || only == what; };
    try {
        CudaBackend be(0, DType::BF16);
        be.set_graphs(false);
        const int64_t H = 5120, Hq = 24, Hkv = 4, D = 256, Hk = 16, Hv = 48, dk = 128, dv = 128;
        const int64_t C = 2 * Hk * dk + Hv * dv;
        uint64_t seed = 1;
        auto S = [&](std::initializer_list<int64_t> sh, DType dt = DType::BF16, float amp = 1.0f) {
            Tensor t = be.alloc_persistent(dt, sh);
            cuda::random_fill(t.data, dt, t.numel(), seed++, amp, 0.0f, be.stream());
            return t;
        };
        std::printf("context %lld, %d ops per graph\n", static_cast<long long>(ctx), reps);

        // DeltaNet b | a (BF16 [96, 5120]) and a few other gemv shapes the BF16 model decodes with.
        for (int64_t T : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}}) {
            if (!want("gemv")) break;
            Tensor w = S({2 * Hv, H}, DType::BF16, 0.02f), x = S({T, H});
            Tensor y = S({T, 2 * Hv}), yb = S({T, Hv}), ya = S({T, Hv});
            report("gemv b|a T" + std::to_string(T) + " N96 K5120 (one call)",
                   graph_us(be, reps, [&] { be.matmul(x, w, y); }), 2.0 * Hv * H * 2);
            if (T > 1) {
                Tensor parts[2] = {yb, ya};
                report("matmul_split b|a T" + std::to_string(T) + " (backend's choice)",
                       graph_us(be, reps, [&] { be.matmul_split(x, w, parts, 2); }), 2.0 * Hv * H * 2);
            }
        }
        for (auto [N, K] : {std::pair<int64_t, int64_t>{1024, 5120}, {5120, 6144}, {14336, 5120}, {34816, 5120}}) {
            if (!want("gemv")) break;
            Tensor w = S({N, K}, DType::BF16, 0.02f);
            for (int64_t T : {int64_t{1}, int64_t{4}}) {
                Tensor x = S({T, K}), y = S({T, N});
                report("gemv T" + std::to_string(T) + " N" + std::to_string(N) + " K" + std::to_string(K),
                       graph_us(be, reps, [&] { be.matmul(x, w, y); }), 2.0 * N * K);
            }
            be.free_persistent(w);
        }

        // DeltaNet: conv (+ state), the fused recurrent step, and gdn_core (both).
        Tensor cw = S({C, 4}, DType::BF16, 0.5f), cst = S({3, C});
        Tensor Al = S({Hv}, DType::F32, 0.5f), dtb = S({Hv}, DType::F32, 0.5f), nw = S({dv}, DType::F32, 0.5f);
        Tensor st = S({Hv, dk, dv}, DType::F32, 0.01f);
        for (int64_t T : {int64_t{1}, int64_t{4}}) {
            if (!want("gdn")) break;
            Tensor mixed = S({T, C}), conv = S({T, C}), a = S({T, Hv}), b = S({T, Hv}), z = S({T, Hv * dv});
            Tensor o = S({T, Hv * dv});
            const std::string t = " T" + std::to_string(T);
            report("conv1d_silu" + t + " C10240", graph_us(be, reps, [&] { be.conv1d_silu(mixed, cw, cst, conv); }),
                   2.0 * T * C * 2 + 2.0 * 3 * C * 2 + 2.0 * C * 4);
            report("gdn_step_fused" + t, graph_us(be, reps, [&] {
                       cuda::gdn_step_fused(conv, a, b, Al, dtb, st, z, nw, 1e-6f, Hk, o, be.stream());
                   }),
                   2.0 * Hv * dk * dv * 4);
            report("gdn_core" + t + " (conv + step)", graph_us(be, reps, [&] {
                       be.gdn_core(mixed, cw, cst, a, b, Al, dtb, st, z, nw, 1e-6f, Hk, o);
                   }),
                   2.0 * Hv * dk * dv * 4);
            Tensor xh = S({T, H}), baw = S({2 * Hv, H}, DType::BF16, 0.02f);
            if (cuda::gdn_step_ba_ok(T, dv, baw))
                for (bool z_prior : {true, false})  // z read before / after the kernel's wait
                    report("gdn_core_ba" + t + " (conv + step, b | a folded in" + (z_prior ? ")" : ", z late)"),
                           graph_us(be, reps, [&] {
                               be.conv1d_silu(mixed, cw, cst, conv);
                               be.gdn_core_ba(conv, xh, baw, Al, dtb, st, z, z_prior, nw, 1e-6f, Hk, o);
                           }),
                           2.0 * Hv * dk * dv * 4 + 2.0 * Hv * H * 2);
            be.free_persistent(xh);
            be.free_persistent(baw);
        }

        // Gated attention core at context ctx (and 4K / 32K for the BF16 model's long-context decode).
        RopeParams rp;
        rp.rot_dim = 64;
        for (int f = 0; f < 32; ++f) rp.inv_freq.push_back(std::pow(1e7f, -2.0f * f / 64.0f));
        Tensor qn = S({D}, DType::F32, 0.3f), kn = S({D}, DType::F32, 0.3f);
        const int64_t max_ctx = 32768 + 16;
        Tensor kc = S({max_ctx, Hkv, D}), vc = S({max_ctx, Hkv, D});
        for (int64_t n : {ctx, int64_t{4096}, int64_t{32768}}) {
            for (int64_t T : {int64_t{1}, int64_t{4}}) {
                if ((T > 1 && n != ctx) || !want("attn")) continue;
                Tensor qg = S({T, Hq * 2 * D}), k = S({T, Hkv * D}), v = S({T, Hkv * D}), o = S({T, Hq * D});
                std::vector<int32_t> pos;
                for (int64_t i = 0; i < T; ++i) pos.push_back(static_cast<int32_t>(n + i));
                Tensor p = be.upload_raw(pos.data(), DType::I32, {T});
                report("gated_attention_core T" + std::to_string(T) + " n_past " + std::to_string(n),
                       graph_us(be, reps, [&] {
                           be.gated_attention_core(qg, k, v, qn, kn, 1e-6f, p, rp, kc, vc, n, 0.0625f, o);
                       }),
                       2.0 * static_cast<double>(n + T) * Hkv * D * 2);
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_decode_ops: %s\n", e.what());
        return 1;
    }
    return 0;
}
