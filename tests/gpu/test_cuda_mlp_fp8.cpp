// The one-row FP8 MLP block in one persistent launch (cuda::mlp_fp8, src/kernels/cuda/mlp_fp8.cu) against the
// CPU oracle, on the H200; skipped without a GPU. Fresh random weights and inputs every run (seed printed).
//
// Kernel level (weights packed in the orders it reads: gate | up kNtMajorPaired as the CUDA linear packs it,
// and kNtMajor on two shapes; down kNtMajor), on shapes where the blocks' ranges cut
// n-tiles and gate | up pairs at both ends, where one down n-tile spans ~8 ranges, with one scale group a row,
// and the 27B MLP itself; h and y poisoned with NaN before each launch:
//   h against fp64 silu(g) * u. The kernel rounds g, u and h to BF16 (each at most 2^-9 relative) and sums in
//   fp32 (~2e-5 of sum |w x|, as test_cuda_quant), so |h - h64| <= |silu'(g) u| dg + |silu(g)| du + 2^-8 |h64|
//   with dg = 2^-8 |g| + 2e-5 sum |wg x| (du alike): 2x the roundings. One wrong weight or x value moves g by
//   ~sum |w x| / K, far past that where g is not tiny against sum |w x| (the bulk of the outputs).
//   y against fp64 down (the kernel's own h): 2e-5 sum |wd h| + 2^-8 |y| (fp32 summation, one BF16 rounding).
//   Three launches give identical bits (deterministic sums of the cut n-tiles and pairs) and leave the
//   workspace counters at zero (the qmm kernels share them).
// Linear level: offers_mlp for one row of an FP8 gate | up with an FP8 down only, only for weights the loader
// marks as the MLP's (Fp8Host::role) and only with GRIMOIRE_MLP_FUSED=1; forward_mlp direct, captured and replayed equals itself bit for bit and the unfused
// forward_glu + down to BF16 rounding (the fused launch where offered). forward_norm_mlp (the norm in the same
// launch where offered: GRIMOIRE_MLP_FUSED_NORM=1 too) leaves res as add_rmsnorm does, bit for bit, and its
// output matches add_rmsnorm + the block to BF16 rounding.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "gpu_test_util.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cuda/quant.h"
#include "quant/linear.h"
#include "quant/quantized.h"
#include "quant/repack.h"
#include "quant_test_util.h"

namespace grimoire {
namespace {

std::vector<float> dequant(const Fp8Host& h) {
    std::vector<float> w(static_cast<size_t>(h.N * h.K));
    cpu::dequant_fp8_rows({h.w.data(), h.scales.data(), h.N, h.K, h.bn, h.bk}, 0, h.N, w.data());
    return w;
}

// A packed device copy of an FP8 weight for direct cuda:: calls in tile order `order` (tile_layout.h).
cuda::Fp8Dev upload_fp8(DirectQmm& q, const Fp8Host& h, int order) {
    const PackedFp8 p = repack_fp8(h, order);
    cuda::Fp8Dev d;
    d.tile_order = order;
    d.N = p.N, d.K = p.K, d.NT = p.NT, d.KC = p.KC, d.bn = p.bn, d.bk = p.bk, d.SN = p.SN, d.SG = p.SG;
    d.words = static_cast<const uint32_t*>(q.up(p.words.data(), p.words.size() * 4));
    d.scales = static_cast<const float*>(q.up(p.scales.data(), p.scales.size() * 4));
    return d;
}

bool hopper() {
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    return major >= 9;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

struct MlpCase {
    int64_t D, I;
    int gu_order;  // gate | up's tile order
};
class CudaMlpFp8 : public ::testing::TestWithParam<MlpCase> {};

TEST_P(CudaMlpFp8, MatchesOracleAndIsDeterministic) {
    GRIMOIRE_REQUIRE_GPU();
    const auto [D, I, gu_order] = GetParam();
    std::mt19937 rng(fresh_seed());
    const Fp8Host gu = random_fp8(2 * I, D, true, rng), dn = random_fp8(D, I, true, rng);
    const std::string what = "D " + std::to_string(D) + " I " + std::to_string(I) + " gate | up order " +
                             std::to_string(gu_order);
    DirectQmm q;
    const cuda::Fp8Dev dgu = upload_fp8(q, gu, gu_order), ddn = upload_fp8(q, dn, kNtMajor);
    if (!hopper()) GTEST_SKIP() << "mlp_fp8 needs sm_90";
    ASSERT_TRUE(cuda::mlp_fp8_ok(dgu, ddn)) << what;
    // The qmm workspace of the larger weight plus the kernel's own need, counters zero.
    size_t pb = 0, pb2 = 0;
    int nc = 0, nc2 = 0;
    cuda::qmm_workspace_need(2 * I, D, &pb, &nc);
    cuda::mlp_fp8_workspace_need(D, I, &pb2, &nc2);
    pb = std::max(pb, pb2), nc = std::max(nc, nc2);
    q.ws.partials = static_cast<float*>(q.up(std::vector<uint8_t>(pb).data(), pb)), q.ws.partial_bytes = pb;
    q.ws.counters = static_cast<int*>(q.up(std::vector<int>(static_cast<size_t>(nc)).data(), static_cast<size_t>(nc) * 4));
    q.ws.n_counters = nc;

    const std::vector<float> xv = test::rand_bf16(static_cast<size_t>(D), rng(), -2.0f, 2.0f);
    Tensor x = q.x_bf16(xv, 1, D);
    std::vector<uint16_t> nan16(static_cast<size_t>(std::max(D, I)), 0xFFFFu);
    Tensor h(q.up(nan16.data(), static_cast<size_t>(I) * 2), DType::BF16, Device::CUDA, {1, I});
    Tensor y(q.up(nan16.data(), static_cast<size_t>(D) * 2), DType::BF16, Device::CUDA, {1, D});

    // fp64 oracle of g, u.
    const std::vector<float> wgu = dequant(gu), wdn = dequant(dn);
    std::vector<double> gu64, gumag;
    test::host_matmul(xv, wgu, 1, 2 * I, D, gu64, gumag);

    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    std::vector<uint16_t> h0, y0;
    for (int rep = 0; rep < 3; ++rep) {
        ASSERT_EQ(cudaMemset(h.data, 0xFF, h.nbytes()), cudaSuccess);
        ASSERT_EQ(cudaMemset(y.data, 0xFF, y.nbytes()), cudaSuccess);
        cuda::mlp_fp8(dgu, ddn, x, h, y, q.ws, stream);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << what;
        std::vector<uint16_t> hb(static_cast<size_t>(I)), yb(static_cast<size_t>(D));
        ASSERT_EQ(cudaMemcpy(hb.data(), h.data, hb.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(yb.data(), y.data, yb.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        std::vector<int> cnt(static_cast<size_t>(nc));
        ASSERT_EQ(cudaMemcpy(cnt.data(), q.ws.counters, cnt.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < cnt.size(); ++i) ASSERT_EQ(cnt[i], 0) << what << " counter " << i << " rep " << rep;
        if (rep == 0) {
            h0 = hb, y0 = yb;
            continue;
        }
        EXPECT_EQ(hb, h0) << what << " h differs between launches (rep " << rep << ")";
        EXPECT_EQ(yb, y0) << what << " y differs between launches (rep " << rep << ")";
    }

    cudaStreamDestroy(stream);

    // h against fp64 silu(g) * u.
    std::vector<float> hk(static_cast<size_t>(I));
    size_t bad_h = 0, first_h = 0;
    for (int64_t n = 0; n < I; ++n) {
        const double g = gu64[static_cast<size_t>(n)], u = gu64[static_cast<size_t>(I + n)];
        const double dg = std::ldexp(std::abs(g), -8) + 2e-5 * gumag[static_cast<size_t>(n)];
        const double du = std::ldexp(std::abs(u), -8) + 2e-5 * gumag[static_cast<size_t>(I + n)];
        const double sg = 1.0 / (1.0 + std::exp(-g));
        const double want = silu(g) * u;
        const double tol = std::abs(sg * (1.0 + g * (1.0 - sg)) * u) * dg + std::abs(silu(g)) * du +
                           std::ldexp(std::abs(want), -8) + 1e-30;
        hk[static_cast<size_t>(n)] = bf16_to_f32(h0[static_cast<size_t>(n)]);
        const double got = hk[static_cast<size_t>(n)];
        if (!(std::abs(got - want) <= 2.0 * tol) && bad_h++ == 0) first_h = static_cast<size_t>(n);
    }
    EXPECT_EQ(bad_h, 0u) << what << ": h first bad at " << first_h << " got " << hk[first_h] << " want "
                         << silu(gu64[first_h]) * gu64[static_cast<size_t>(I) + first_h];

    // y against fp64 down over the kernel's own h.
    std::vector<double> y64, ymag;
    test::host_matmul(hk, wdn, 1, D, I, y64, ymag);
    size_t bad_y = 0, first_y = 0;
    for (int64_t n = 0; n < D; ++n) {
        const double got = bf16_to_f32(y0[static_cast<size_t>(n)]), want = y64[static_cast<size_t>(n)];
        const double tol = 2e-5 * ymag[static_cast<size_t>(n)] + std::ldexp(std::abs(want), -8);
        if (!(std::abs(got - want) <= tol) && bad_y++ == 0) first_y = static_cast<size_t>(n);
    }
    EXPECT_EQ(bad_y, 0u) << what << ": y first bad at " << first_y << " got " << bf16_to_f32(y0[first_y])
                         << " want " << y64[first_y];
}

INSTANTIATE_TEST_SUITE_P(Shapes,
                         CudaMlpFp8,
                         ::testing::Values(MlpCase{256, 8192, kNtMajorPaired},  // down: an n-tile over ~8 ranges
                                           MlpCase{128, 4096, kNtMajorPaired},  // one scale group a row in gate | up
                                           MlpCase{2432, 4480, kNtMajorPaired}, // n-tiles cut at both ends of ranges
                                           MlpCase{5120, 17408, kNtMajorPaired},  // the 27B MLP
                                           MlpCase{2432, 4480, kNtMajor},  // gate | up read from two places
                                           MlpCase{5120, 17408, kNtMajor}));

TEST(CudaMlpFp8Linear, OffersOneRowAndMatchesTheUnfusedBlock) {
    GRIMOIRE_REQUIRE_GPU();
    if (!hopper()) GTEST_SKIP() << "mlp_fp8 needs sm_90";
    const char* env = std::getenv("GRIMOIRE_MLP_FUSED");
    const bool on = env && env[0] == '1';  // an opt-in (quant_linear.cpp): gpu_check.sh reruns this test with it
    std::mt19937 rng(fresh_seed());
    CudaBackend gpu(0, DType::BF16);
    const int64_t D = 2432, I = 4480;
    auto host = [&](int64_t N, int64_t K, bool block, WeightRole role) {
        Fp8Host h = random_fp8(N, K, block, rng);
        h.role = role;
        return h;
    };
    const Fp8Host hgu = host(2 * I, D, true, WeightRole::GLU_GATE_UP), hdn = host(D, I, true, WeightRole::MLP_DOWN);
    // Unmarked weights keep the chunk-major order, which the block does not read.
    const Fp8Host hgu_plain = host(2 * I, D, true, WeightRole::OTHER), hdn_plain = host(D, I, true, WeightRole::OTHER);
    auto gu = make_fp8_linear(gpu, hgu, Tensor{}, "test fp8", 0);
    auto dn = make_fp8_linear(gpu, hdn, Tensor{}, "test fp8", 0);
    auto dn_channel = make_fp8_linear(gpu, host(D, I, false, WeightRole::MLP_DOWN), Tensor{}, "test fp8", 0);
    auto gu_plain = make_fp8_linear(gpu, hgu_plain, Tensor{}, "test fp8", 0);
    auto dn_plain = make_fp8_linear(gpu, hdn_plain, Tensor{}, "test fp8", 0);
    EXPECT_EQ(gu->offers_mlp(1, *dn), on);
    EXPECT_FALSE(gu->offers_mlp(2, *dn));
    EXPECT_FALSE(gu->offers_mlp(1, *dn_channel));  // per-channel scales: one group a row
    EXPECT_FALSE(dn->offers_mlp(1, *gu));          // not a gate | up over down's shapes
    const char* all_ntm = std::getenv("GRIMOIRE_FP8_NT_MAJOR");
    if (!(all_ntm && all_ntm[0] == '1')) {
        EXPECT_FALSE(gu_plain->offers_mlp(1, *dn));
        EXPECT_FALSE(gu->offers_mlp(1, *dn_plain));
    }
    // Whatever order each was packed in, dequantize (the packed tiles read back through tile_index) gives the
    // oracle's weight bit for bit.
    EXPECT_TRUE(gu->dequantize() == dequant(hgu)) << "gate | up";
    EXPECT_TRUE(dn->dequantize() == dequant(hdn)) << "down";
    EXPECT_TRUE(gu_plain->dequantize() == dequant(hgu_plain)) << "unmarked gate | up";

    Tensor x = test::put(gpu, test::rand_bf16(static_cast<size_t>(D), rng(), -2.0f, 2.0f), DType::BF16, {1, D});
    Tensor want = gpu.alloc_persistent(DType::BF16, {1, D}), got = gpu.alloc_persistent(DType::BF16, {1, D});
    gpu.reset_scratch();
    gu->Linear::forward_mlp(gpu, x, *dn, want);  // forward_glu (default: parts + silu_mul) + down
    const std::vector<float> ref = test::get(gpu, want);
    double ref_max = 0;
    for (float v : ref) ref_max = std::max(ref_max, double(std::abs(v)));
    std::vector<float> first;
    for (int rep = 0; rep < 3; ++rep) {  // direct, captured, replayed
        test::poison(gpu, got);
        gpu.reset_scratch();
        gu->forward_mlp(gpu, x, *dn, got);
        const std::vector<float> y = test::get(gpu, got);
        if (rep == 0) {
            first = y;
            // h may round differently in a few places (fp32 summation order): a BF16 step of one h value
            // moves y by ~2^-8 |wd h|, far under 1% of max |y|.
            test::expect_close(y, ref, 1e-2 * ref_max, 2e-2, "forward_mlp vs unfused");
        } else {
            EXPECT_EQ(0, std::memcmp(y.data(), first.data(), y.size() * 4)) << "rep " << rep;
        }
    }
    gpu.free_persistent(want), gpu.free_persistent(got);

    // The residual add + RMSNorm in the same pass (forward_norm_mlp, offered with the block): res as add_rmsnorm
    // leaves it bit for bit, out against the default (add_rmsnorm, then the block) as above; out is y itself.
    const char* norm_env = std::getenv("GRIMOIRE_MLP_FUSED_NORM");  // its own opt-in, on top of the block's
    EXPECT_EQ(gu->offers_norm_mlp(1, *dn), on && norm_env && norm_env[0] == '1');
    const std::vector<float> resv = test::rand_bf16(static_cast<size_t>(D), rng(), -4.0f, 4.0f);
    const std::vector<float> yv = test::rand_bf16(static_cast<size_t>(D), rng(), -1.0f, 1.0f);
    std::vector<float> wv(static_cast<size_t>(D));
    std::uniform_real_distribution<float> wd(-0.5f, 0.5f);
    for (auto& v : wv) v = wd(rng);
    Tensor nw = test::put(gpu, wv, DType::F32, {D});
    for (NormKind kind : {NormKind::PLAIN, NormKind::PLUS_ONE}) {
        Tensor res_a = test::put(gpu, resv, DType::BF16, {1, D}), y_a = test::put(gpu, yv, DType::BF16, {1, D});
        Tensor res_b = test::put(gpu, resv, DType::BF16, {1, D}), y_b = test::put(gpu, yv, DType::BF16, {1, D});
        Tensor out_a = gpu.alloc_persistent(DType::BF16, {1, D});
        gpu.reset_scratch();
        gu->Linear::forward_norm_mlp(gpu, res_a, y_a, nw, 1e-6f, kind, *dn, out_a);
        gpu.reset_scratch();
        gu->forward_norm_mlp(gpu, res_b, y_b, nw, 1e-6f, kind, *dn, y_b);
        const std::vector<float> ra = test::get(gpu, res_a), rb = test::get(gpu, res_b);
        EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * 4)) << "res after the norm, kind " << int(kind);
        const std::vector<float> oa = test::get(gpu, out_a), ob = test::get(gpu, y_b);
        double oa_max = 0;
        for (float v : oa) oa_max = std::max(oa_max, double(std::abs(v)));
        // rsqrt of the sum of squares may differ in its last bit (fp32 order), moving x by a BF16 step in places.
        test::expect_close(ob, oa, 1e-2 * oa_max, 2e-2, "forward_norm_mlp vs add_rmsnorm + block");
        for (Tensor* t : {&res_a, &y_a, &res_b, &y_b, &out_a}) gpu.free_persistent(*t);
    }
    gpu.free_persistent(nw);
}

}  // namespace
}  // namespace grimoire
