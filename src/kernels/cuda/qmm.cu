// Quantized weight (INT4 group-quantized or FP8 E4M3) x activations for M = 1..16 rows (decode, concurrent
// users, speculative verify): the launchers around quant_mma.cuh's kernel and the split-K workspace sizing.
#include <cstdlib>

#include "kernels/cuda/quant_mma.cuh"

namespace grimoire::cuda {

namespace qmm {
int device_sms() {
    static int sms = [] {
        int dev = 0, n = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
        return n > 0 ? n : 132;
    }();
    return sms;
}
}  // namespace qmm

// Partials: [grid block][2][M][kColBlock] f32 for at most kMaxBlocksPerSm blocks per SM; counters: one per column block.
constexpr int kMaxBlocksPerSm = 8;
constexpr int kMinBatches = 4;

void qmm_workspace_need(int64_t N, int64_t K, size_t* partial_bytes, int* n_counters) {
    (void)K;
    const int64_t NT = (N + 15) / 16;
    *partial_bytes = static_cast<size_t>(qmm::device_sms()) * kMaxBlocksPerSm * 2 * kQmmMaxM * qmm::kColBlock * 4;
    *n_counters = static_cast<int>((NT + qmm::kNtPerBlock - 1) / qmm::kNtPerBlock);
}

namespace {

template <bool FP8, int MT, bool ASYM, class ST>
void launch(qmm::Args& a, const QmmWorkspace& ws, int forced_blocks, cudaStream_t s) {
    constexpr int U = qmm::batch_chunks(FP8);
    const size_t smem =
        static_cast<size_t>(a.M) * static_cast<size_t>(qmm::max_batches(a.M, FP8) * U * 64 + qmm::kXPad) * 2;
    // Blocks resident per SM for this M (shared memory depends on it), asked once per instantiation and M.
    static int occ[kQmmMaxM + 1] = {};
    int& o = occ[a.M];
    if (o == 0) {
        int n = 0;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, qmm::qmm_kernel<FP8, MT, ASYM, ST>, qmm::kThreads, smem);
        o = n < 1 ? 1 : (n > kMaxBlocksPerSm ? kMaxBlocksPerSm : n);
    }
    // One wave of resident blocks, but at least kMinBatches batches each: a grid block's fixed costs (first
    // load latency, staging, partial write, arrival) must be spread over enough streaming.
    static const int min_batches = [] {
        const char* e = std::getenv("GRIMOIRE_QMM_MIN_BATCHES");
        return e && std::atoi(e) > 0 ? std::atoi(e) : kMinBatches;
    }();
    int blocks = forced_blocks > 0 ? forced_blocks : o * qmm::device_sms();
    if (forced_blocks <= 0 && blocks > a.W / min_batches) blocks = a.W / min_batches;
    if (blocks < 1) blocks = 1;
    if (blocks > a.W) blocks = a.W;
    if (static_cast<size_t>(blocks) * 2 * a.M * qmm::kColBlock * 4 > ws.partial_bytes)
        throw Error("cuda qmm: partials workspace too small (reserve qmm_workspace_need)");
    qmm::qmm_kernel<FP8, MT, ASYM, ST><<<static_cast<unsigned>(blocks), qmm::kThreads, smem, s>>>(a);
}

template <bool FP8, bool ASYM, class ST>
void launch_mt(qmm::Args& a, const QmmWorkspace& ws, int forced, cudaStream_t s) {
    if (a.M <= 8) launch<FP8, 1, ASYM, ST>(a, ws, forced, s);
    else launch<FP8, 2, ASYM, ST>(a, ws, forced, s);
}

}  // namespace

// Shared by qmm_int4 / qmm_fp8: validates x / y and the workspace, fills the common arguments.
bool qmm_prepare(const char* op, bool fp8, int64_t N, int64_t K, int64_t NT, int64_t KC, const Tensor& x, Tensor& y,
                 const QmmWorkspace& ws, qmm::Args& a) {
    const int64_t M = x.rows();
    if (x.cols() != K || y.rows() != M || y.cols() != N)
        throw Error(std::string("cuda ") + op + ": x [M, K], y [M, N] disagree with the weight [" + std::to_string(N) +
                    ", " + std::to_string(K) + "]");
    if (M > kQmmMaxM) throw Error(std::string("cuda ") + op + ": M = " + std::to_string(M) + " > 16");
    if (M == 0 || N == 0) return false;
    a.x = x.data, a.xdt = dt_code(x.dtype, op, "x");
    a.y = y.data, a.ydt = dt_code(y.dtype, op, "y");
    a.N = N, a.K = K, a.NT = NT, a.KC = KC, a.M = static_cast<int>(M);
    const int64_t nb = (NT + qmm::kNtPerBlock - 1) / qmm::kNtPerBlock;
    const int U = qmm::batch_chunks(fp8);
    a.BPN = static_cast<int>((KC + U - 1) / U);
    if (nb * a.BPN > (1ll << 30)) throw Error(std::string("cuda ") + op + ": weight too large for 32-bit work indices");
    a.W = static_cast<int>(nb * a.BPN);
    if (!ws.partials || !ws.counters || ws.n_counters < nb)
        throw Error(std::string("cuda ") + op + ": workspace too small (reserve qmm_workspace_need)");
    a.partials = ws.partials, a.counters = ws.counters;
    return true;
}

void qmm_int4(const Int4Dev& w, const Tensor& x, Tensor& y, const QmmWorkspace& ws, cudaStream_t s, int forced) {
    qmm::Args a{};
    if (!qmm_prepare("qmm_int4", false, w.N, w.K, w.NT, w.KC, x, y, ws, a)) return;
    a.words = w.words, a.scales = w.scales, a.zeros = w.zeros, a.perm = w.perm;
    a.G = w.G, a.gs = w.group_size, a.NP = w.NT * 16;
    const bool asym = w.zeros != nullptr;
    switch (w.scale_dtype) {
        case DType::F16:
            asym ? launch_mt<false, true, __half>(a, ws, forced, s) : launch_mt<false, false, __half>(a, ws, forced, s);
            break;
        case DType::BF16:
            asym ? launch_mt<false, true, __nv_bfloat16>(a, ws, forced, s)
                 : launch_mt<false, false, __nv_bfloat16>(a, ws, forced, s);
            break;
        case DType::F32:
            asym ? launch_mt<false, true, float>(a, ws, forced, s) : launch_mt<false, false, float>(a, ws, forced, s);
            break;
        default: throw Error("cuda qmm_int4: scales must be F16, BF16 or F32");
    }
    check_launch("qmm_int4");
}

void qmm_fp8(const Fp8Dev& w, const Tensor& x, Tensor& y, const QmmWorkspace& ws, cudaStream_t s, int forced) {
    qmm::Args a{};
    if (!qmm_prepare("qmm_fp8", true, w.N, w.K, w.NT, w.KC, x, y, ws, a)) return;
    a.words = w.words, a.scales = w.scales, a.zeros = nullptr, a.perm = nullptr;
    a.G = w.SG, a.gs = w.bk, a.bn = w.bn, a.SG = w.SG;
    launch_mt<true, false, float>(a, ws, forced, s);
    check_launch("qmm_fp8");
}

}  // namespace grimoire::cuda
