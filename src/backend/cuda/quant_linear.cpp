// The INT4 and FP8 Linear implementations on the CUDA backend. At load the canonical weight (quant/quantized.h)
// is repacked into the tensor-core tile layout (quant/repack.h) and copied to the device once; the host copy
// is dropped. forward() picks the kernel by the number of rows:
//   M <= 16  qmm_int4 / qmm_fp8: one pass over the packed weight, cost flat in M (decode, verify, batches);
//   M > 16   dequantize to a shared BF16 workspace, then the cuBLAS GEMM (prefill: compute-bound there); a
//            128 x 128-block FP8 weight takes the W8A8 FP8 GEMM instead where cuBLASLt offers it (sm_90,
//            CudaFp8Linear::prefill_parts; GRIMOIRE_FP8_GEMM=0 keeps the dequant path).
// With --random-weights the packed words and scales are filled on the device instead (the reader skips the
// host decode and passes an Int4Host / Fp8Host without data).
#include <bit>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.h"
#include "core/error.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/split_cols.h"
#include "quant/quantized.h"
#include "quant/repack.h"

namespace grimoire {

namespace {

constexpr uint64_t kOpQmm = 0x514d4d00ull, kOpDequant = 0x44455100ull, kOpSplit = 0x53504c00ull,
                   kOpW8a8 = 0x57384138ull, kOpMlp = 0x4d4c5000ull;

CudaBackend& cuda_of(Backend& be) {
    auto* c = dynamic_cast<CudaBackend*>(&be);
    GRIMOIRE_CHECK(c != nullptr, "CUDA quantized linear used with a non-CUDA backend");
    return *c;
}

template <class T>
void download(const void* dev, std::vector<T>& host, size_t n) {
    host.resize(n);
    if (n) GRIMOIRE_CUDA_CHECK(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
}

DType scale_dtype(ScaleType t) {
    return t == ScaleType::F16 ? DType::F16 : t == ScaleType::BF16 ? DType::BF16 : DType::F32;
}

// What both formats share: workspaces, the M <= 16 / M > 16 split, the bias.
class CudaQuantLinear : public Linear {
  public:
    CudaQuantLinear(CudaBackend& be, int64_t N, int64_t K, Tensor bias, std::string fmt, size_t bytes)
        : N_(N), K_(K), wdt_(be.act_dtype() == DType::F32 ? DType::F32 : DType::BF16), bias_(bias),
          fmt_(std::move(fmt)), bytes_(bytes) {
        size_t partial = 0;
        int counters = 0;
        cuda::qmm_workspace_need(N, K, &partial, &counters);
        be.reserve_quant_ws(CudaBackend::QuantWs::PARTIALS, partial);
        be.reserve_quant_ws(CudaBackend::QuantWs::COUNTERS, static_cast<size_t>(counters) * sizeof(int));
        be.reserve_quant_ws(CudaBackend::QuantWs::DEQUANT, static_cast<size_t>(N * K) * dtype_size(wdt_));
    }
    int64_t in_features() const override { return K_; }
    int64_t out_features() const override { return N_; }
    std::string format() const override { return fmt_; }
    size_t weight_bytes() const override { return bytes_ + (bias_.data ? bias_.nbytes() : 0); }

    void forward(Backend& be, const Tensor& x, Tensor& y) const override {  // x [M, K], y [M, N] act dtype
        CudaBackend& cb = cuda_of(be);
        if (x.cols() != K_ || y.cols() != N_ || x.rows() != y.rows())
            throw Error("quantized linear (" + fmt_ + "): x [" + std::to_string(x.rows()) + ", " +
                        std::to_string(x.cols()) + "] does not fit the weight [" + std::to_string(N_) + ", " +
                        std::to_string(K_) + "]");
        const int64_t M = x.rows();
        // The F32 reference mode takes the dequant + fp32 GEMM path at every M (the tensor-core kernel rounds
        // activations to BF16), so it matches the CPU oracle up to summation order.
        if (M <= cuda::kQmmMaxM && wdt_ == DType::BF16 && qmm_ok_) {
            const cuda::QmmWorkspace ws = workspace(cb);
            Tensor xv = x, yv = y;
            cb.record(cuda::KeyHasher().add(kOpQmm).add(xv).add(yv).add(id()).h,
                      [this, xv, yv, ws](cudaStream_t s) mutable { run_small(xv, yv, ws, s); });
        } else if (!prefill_parts(cb, x, std::span<Tensor>(&y, 1))) {
            Tensor w(cb.quant_ws(CudaBackend::QuantWs::DEQUANT), wdt_, Device::CUDA, {N_, K_});
            cb.record(cuda::KeyHasher().add(kOpDequant).add(w).add(id()).h,
                      [this, w](cudaStream_t s) { run_dequant(w.data, w.dtype, s); });
            cb.matmul(x, w, y);
        }
        if (bias_.data) be.add_bias(y, bias_);
    }

    // A stacked group's parts (ys[i] [M, w_i] act dtype). M <= 16: the kernel over the whole stacked weight,
    // then ONE launch that splits its [M, N] output into the parts. Prefill: the weight is dequantized ONCE and
    // CudaBackend::matmul_split runs cuBLAS over the dequantized matrix (one GEMM + split, or one per row range).
    void forward_split(Backend& be, const Tensor& x, std::span<Tensor> ys) const override {
        CudaBackend& cb = cuda_of(be);
        if (x.rows() <= cuda::kQmmMaxM && wdt_ == DType::BF16 && qmm_ok_ && !bias_.data &&
            ys.size() <= static_cast<size_t>(cuda::kQmmMaxParts) && parts_enabled()) {
            // The kernel writes each column straight into its part: no [M, N] copy and no split launch (a
            // verify step had one per stacked group).
            cuda::QmmParts parts;
            parts.n = static_cast<int>(ys.size());
            int64_t c0 = 0;
            for (size_t i = 0; i < ys.size(); ++i) {
                GRIMOIRE_CHECK(ys[i].rows() == x.rows() && ys[i].dtype == cb.act_dtype(),
                               "quantized forward_split: parts must be [M, w] of the activation dtype");
                parts.col[i] = static_cast<int>(c0);
                parts.data[i] = ys[i].data;
                c0 += ys[i].cols();
            }
            parts.col[ys.size()] = static_cast<int>(c0);
            GRIMOIRE_CHECK(c0 == N_, "quantized forward_split: parts do not cover the weight");
            cuda::KeyHasher key;
            key.add(kOpQmm).add(x).add(id());
            for (const Tensor& p : ys) key.add(p);
            record_parts(cb, x, parts, key.h);
            return;
        }
        if (x.rows() <= cuda::kQmmMaxM && wdt_ == DType::BF16 && qmm_ok_) {
            if (ys.size() > static_cast<size_t>(cuda::kMaxSplitCols)) return Linear::forward_split(be, x, ys);
            Tensor y = cb.scratch(cb.act_dtype(), {x.rows(), N_});  // [M, N] act
            forward(be, x, y);
            std::vector<Tensor> parts(ys.begin(), ys.end());
            cuda::KeyHasher key;
            key.add(kOpSplit).add(y);
            for (const Tensor& p : parts) key.add(p);
            cb.record(key.h, [y, parts](cudaStream_t s) {
                cuda::split_cols(y, parts.data(), static_cast<int>(parts.size()), s);
            });
            return;
        }
        if (!bias_.data && prefill_parts(cb, x, ys)) return;
        Tensor w(cb.quant_ws(CudaBackend::QuantWs::DEQUANT), wdt_, Device::CUDA, {N_, K_});  // [N, K]
        cb.record(cuda::KeyHasher().add(kOpDequant).add(w).add(id()).h,
                  [this, w](cudaStream_t s) { run_dequant(w.data, w.dtype, s); });
        int64_t r0 = 0;
        if (!bias_.data) {  // the backend picks one GEMM + split or a GEMM per part (CudaBackend::matmul_split)
            for (const Tensor& y : ys) r0 += y.cols();
            GRIMOIRE_CHECK(r0 == N_, "quantized forward_split: parts do not cover the weight");
            cb.matmul_split(x, w, ys.data(), ys.size());
            return;
        }
        for (Tensor& y : ys) {
            const int64_t n = y.cols();
            GRIMOIRE_CHECK(y.rows() == x.rows() && r0 + n <= N_, "quantized forward_split: parts do not fit");
            cb.matmul(x, w.row_slice(r0, n), y);
            if (bias_.data) be.add_bias(y, bias_.view({N_, 1}).row_slice(r0, n).view({n}));
            r0 += n;
        }
        GRIMOIRE_CHECK(r0 == N_, "quantized forward_split: parts do not cover the weight");
    }

    bool offers_glu(int64_t rows) const override {
        return glu_enabled() && rows >= 1 && rows <= cuda::kQmmMaxM && wdt_ == DType::BF16 && qmm_ok_ &&
               !bias_.data && glu_ok(rows);
    }
    void forward_glu(Backend& be, const Tensor& x, Tensor& h) const override {  // x [M, K], h [M, N / 2] act
        CudaBackend& cb = cuda_of(be);
        const int64_t M = x.rows();
        if (!offers_glu(M)) return Linear::forward_glu(be, x, h);
        if (x.cols() != K_ || h.rows() != M || 2 * h.cols() != N_ || h.dtype != cb.act_dtype())
            throw Error("quantized linear (" + fmt_ + "): glu x [" + std::to_string(M) + ", " +
                        std::to_string(x.cols()) + "], h [" + std::to_string(h.rows()) + ", " +
                        std::to_string(h.cols()) + "] do not fit the weight [" + std::to_string(N_) + ", " +
                        std::to_string(K_) + "]");
        cuda::QmmParts parts;
        parts.n = 1, parts.glu = 1;
        parts.col[0] = 0, parts.col[1] = static_cast<int>(N_);
        parts.data[0] = h.data;
        record_parts(cb, x, parts, cuda::KeyHasher().add(kOpQmm).add(x).add(id()).add(h).add(uint64_t{0x474c55}).h);
    }

    bool offers_conv(int64_t rows, const Tensor& conv_w, const Tensor& conv_state) const override {
        const int64_t Kc = conv_w.ndim >= 2 ? conv_w.dim(conv_w.ndim - 1) : 0;
        return conv_enabled() && conv_ok(rows) && wdt_ == DType::BF16 && qmm_ok_ && !bias_.data && parts_enabled() &&
               Kc == cuda::kQmmConvK && conv_state.ndim == 2 && conv_state.dim(0) == Kc - 1 &&
               conv_w.numel() == conv_state.dim(1) * Kc && cuda::qmm_dtype_code(conv_w.dtype) >= 0 &&
               cuda::qmm_dtype_code(conv_state.dtype) >= 0 && conv_w.device == Device::CUDA &&
               conv_state.device == Device::CUDA;
    }
    void forward_split_conv(Backend& be, const Tensor& x, std::span<Tensor> ys, const Tensor& conv_w,
                            Tensor& conv_state) const override {
        CudaBackend& cb = cuda_of(be);
        if (!offers_conv(x.rows(), conv_w, conv_state) || ys.empty() ||
            ys.size() > static_cast<size_t>(cuda::kQmmMaxParts) || ys[0].cols() != conv_state.dim(1))
            return Linear::forward_split_conv(be, x, ys, conv_w, conv_state);
        cuda::QmmParts parts;
        parts.n = static_cast<int>(ys.size());
        int64_t c0 = 0;
        for (size_t i = 0; i < ys.size(); ++i) {
            GRIMOIRE_CHECK(ys[i].rows() == x.rows() && ys[i].dtype == cb.act_dtype(),
                           "quantized forward_split_conv: parts must be [M, w] of the activation dtype");
            parts.col[i] = static_cast<int>(c0);
            parts.data[i] = ys[i].data;
            c0 += ys[i].cols();
        }
        parts.col[ys.size()] = static_cast<int>(c0);
        GRIMOIRE_CHECK(c0 == N_, "quantized forward_split_conv: parts do not cover the weight");
        parts.conv = 1, parts.conv_k = cuda::kQmmConvK;
        parts.conv_w = conv_w.data, parts.conv_wdt = cuda::qmm_dtype_code(conv_w.dtype);
        parts.conv_state = conv_state.data, parts.conv_sdt = cuda::qmm_dtype_code(conv_state.dtype);
        cuda::KeyHasher key;
        key.add(kOpQmm).add(x).add(id()).add(conv_w).add(conv_state).add(uint64_t{0x434f4e56});
        for (const Tensor& p : ys) key.add(p);
        record_parts(cb, x, parts, key.h);
    }

  protected:
    // GRIMOIRE_QMM_CONV=0: the DeltaNet in_proj's q | k | v part is stored and conv1d_silu runs as its own
    // launch (the A/B of QmmParts::conv).
    static bool conv_enabled() {
        static const bool on = [] {
            const char* e = std::getenv("GRIMOIRE_QMM_CONV");
            return !(e && e[0] == '0');
        }();
        return on;
    }
    // One small-M launch whose output goes to `parts` (forward_split's parts, forward_glu's h).
    void record_parts(CudaBackend& cb, const Tensor& x, const cuda::QmmParts& parts, uint64_t key) const {
        const cuda::QmmWorkspace ws = workspace(cb);
        const Tensor xv = x;
        Tensor yv(nullptr, cb.act_dtype(), Device::CUDA, {x.rows(), N_});  // shape and dtype only
        cb.record(key, [this, xv, yv, ws, parts](cudaStream_t s) mutable { run_small(xv, yv, ws, s, &parts); });
    }
    // GRIMOIRE_GLU=0: gate_up runs as two parts and silu_mul (the A/B of the one-pass form).
    static bool glu_enabled() {
        static const bool on = [] {
            const char* e = std::getenv("GRIMOIRE_GLU");
            return !(e && e[0] == '0');
        }();
        return on;
    }
    virtual bool glu_ok(int64_t M) const = 0;
    virtual bool conv_ok(int64_t M) const = 0;
    // GRIMOIRE_QMM_PARTS=0: stacked groups at M <= 16 write [M, N] and split it with split_cols (a benchmark
    // variant; the default writes the parts from the kernel).
    static bool parts_enabled() {
        static const bool on = [] {
            const char* e = std::getenv("GRIMOIRE_QMM_PARTS");
            return !(e && e[0] == '0');
        }();
        return on;
    }
    static cuda::QmmWorkspace workspace(const CudaBackend& cb) {
        cuda::QmmWorkspace ws;
        ws.partials = static_cast<float*>(cb.quant_ws(CudaBackend::QuantWs::PARTIALS));
        ws.partial_bytes = cb.quant_ws_bytes(CudaBackend::QuantWs::PARTIALS);
        ws.counters = static_cast<int*>(cb.quant_ws(CudaBackend::QuantWs::COUNTERS));
        ws.n_counters = static_cast<int>(cb.quant_ws_bytes(CudaBackend::QuantWs::COUNTERS) / sizeof(int));
        return ws;
    }
    virtual const void* id() const = 0;
    // y [M, N]; with `parts`, y is shape-only and the result goes to the parts (cuda::QmmParts).
    virtual void run_small(const Tensor& x,
                           Tensor& y,
                           const cuda::QmmWorkspace& ws,
                           cudaStream_t s,
                           const cuda::QmmParts* parts = nullptr) const = 0;
    virtual void run_dequant(void* out, DType dt, cudaStream_t s) const = 0;
    // A prefill (M > 16) route other than dequant + GEMM, writing the consecutive column ranges ys (one part: y
    // itself); false where the weight has none or it does not take these shapes (the caller then dequantizes).
    virtual bool prefill_parts(CudaBackend& cb, const Tensor& x, std::span<Tensor> ys) const {
        (void)cb, (void)x, (void)ys;
        return false;
    }
    int64_t N_, K_;
    DType wdt_;  // dequant workspace dtype: the activations' (BF16, or F32 in the reference mode)
    bool qmm_ok_ = true;  // the scale grid suits qmm_* (cuda::qmm_supported); else every M takes the dequant path
    Tensor bias_;
    std::string fmt_;
    size_t bytes_;
};

class CudaInt4Linear final : public CudaQuantLinear {
  public:
    CudaInt4Linear(CudaBackend& be, Int4Host&& h, Tensor bias, std::string fmt, size_t bytes)
        : CudaQuantLinear(be, h.N, h.K, bias, std::move(fmt), bytes) {
        PackedInt4 p;
        const bool random = h.q.empty();
        if (random) {  // --random-weights: symmetric, F16 scales, consecutive groups of K / G
            p.N = h.N, p.K = h.K, p.G = h.G, p.group_size = h.G == 1 ? h.K : (h.K + h.G - 1) / h.G;
            p.NT = (h.N + 15) / 16, p.KC = (h.K + 63) / 64;
        } else {
            p = repack_int4(h);
        }
        h = Int4Host{};  // the device copy is the only one from here on
        d_.N = p.N, d_.K = p.K, d_.G = p.G, d_.group_size = p.group_size, d_.NT = p.NT, d_.KC = p.KC;
        qmm_ok_ = cuda::qmm_supported(p.group_size, p.G);
        d_.scale_dtype = scale_dtype(p.scale_type);
        const size_t nwords = static_cast<size_t>(p.NT * p.KC * 32 * 4);
        const size_t nscales = static_cast<size_t>(p.G * p.NT * 16);
        d_.words = static_cast<const uint32_t*>(be.weight_buffer(nwords * 4, random ? nullptr : p.words.data()));
        d_.scales = be.weight_buffer(random ? nscales * 2 : p.scales.size(), random ? nullptr : p.scales.data());
        if (!p.symmetric) d_.zeros = static_cast<const uint8_t*>(be.weight_buffer(p.zeros.size(), p.zeros.data()));
        if (!p.perm.empty())
            d_.perm = static_cast<const int32_t*>(be.weight_buffer(p.perm.size() * 4, p.perm.data()));
        if (random) {
            const uint64_t seed = be.random_seed_for(fmt_ + std::to_string(reinterpret_cast<uintptr_t>(d_.words)));
            cuda::random_bits(const_cast<uint32_t*>(d_.words), static_cast<int64_t>(nwords), seed, 0xFFFFFFFFu,
                              be.stream());
            cuda::random_fill(const_cast<void*>(d_.scales), DType::F16, static_cast<int64_t>(nscales), seed + 1,
                              0.0005f, 0.0015f, be.stream());
        }
    }
    std::vector<float> dequantize() const override {
        PackedInt4 p;
        p.N = d_.N, p.K = d_.K, p.G = d_.G, p.group_size = d_.group_size, p.NT = d_.NT, p.KC = d_.KC;
        p.scale_type = d_.scale_dtype == DType::F16 ? ScaleType::F16
                       : d_.scale_dtype == DType::BF16 ? ScaleType::BF16 : ScaleType::F32;
        const size_t ss = d_.scale_dtype == DType::F32 ? 4 : 2;
        download(d_.words, p.words, static_cast<size_t>(p.NT * p.KC * 32 * 4));
        download(d_.scales, p.scales, static_cast<size_t>(p.G * p.NT * 16) * ss);
        p.symmetric = d_.zeros == nullptr;
        if (d_.zeros) download(d_.zeros, p.zeros, static_cast<size_t>(p.G * p.NT * 16));
        if (d_.perm) download(d_.perm, p.perm, static_cast<size_t>(p.K));
        return unpack_int4(p);
    }

    // The codes first (what the kernel streams), then the scale and zero tables.
    void prefetch(Backend& be) const override {
        const size_t ss = d_.scale_dtype == DType::F32 ? 4 : 2, tab = static_cast<size_t>(d_.G * d_.NT * 16);
        be.l2_prefetch(d_.words, static_cast<size_t>(d_.NT * d_.KC * 32 * 4) * 4);
        be.l2_prefetch(d_.scales, tab * ss);
        if (d_.zeros) be.l2_prefetch(d_.zeros, tab);
    }

  private:
    const void* id() const override { return d_.words; }
    void run_small(const Tensor& x,
                   Tensor& y,
                   const cuda::QmmWorkspace& ws,
                   cudaStream_t s,
                   const cuda::QmmParts* parts) const override {
        cuda::qmm_int4(d_, x, y, ws, s, 0, parts);
    }
    void run_dequant(void* out, DType dt, cudaStream_t s) const override { cuda::dequant_int4(d_, out, dt, s); }
    bool glu_ok(int64_t M) const override {
        return cuda::qmm_glu_ok(false, d_.zeros != nullptr, M, d_.N, d_.K, d_.group_size, d_.G);
    }
    bool conv_ok(int64_t M) const override {
        return cuda::qmm_conv_ok(false, d_.zeros != nullptr, M, d_.N, d_.K, d_.group_size, d_.G);
    }
    cuda::Int4Dev d_;
};

class CudaFp8Linear final : public CudaQuantLinear {
  public:
    CudaFp8Linear(CudaBackend& be, Fp8Host&& h, Tensor bias, std::string fmt, size_t bytes)
        : CudaQuantLinear(be, h.N, h.K, bias, std::move(fmt), bytes) {
        PackedFp8 p;
        const bool random = h.w.empty();
        const int order = tile_order_for(h);
        if (random) {
            p.N = h.N, p.K = h.K, p.bn = h.bn, p.bk = h.bk;
            p.NT = (h.N + 15) / 16, p.KC = (h.K + 63) / 64;
            p.SN = (h.N + h.bn - 1) / h.bn, p.SG = (h.K + h.bk - 1) / h.bk;
            p.tile_order = order;
        } else {
            p = repack_fp8(h, order);
        }
        const bool glu_role = h.role == WeightRole::GLU_GATE_UP;
        h = Fp8Host{};
        if (mlp_enabled() && glu_role) {  // the opt-in one-launch MLP block's partials and counters (D = K, I = N / 2)
            size_t mlp_partial = 0;
            int mlp_counters = 0;
            cuda::mlp_fp8_workspace_need(p.K, p.N / 2, &mlp_partial, &mlp_counters);
            be.reserve_quant_ws(CudaBackend::QuantWs::PARTIALS, mlp_partial);
            be.reserve_quant_ws(CudaBackend::QuantWs::COUNTERS, static_cast<size_t>(mlp_counters) * sizeof(int));
        }
        d_.N = p.N, d_.K = p.K, d_.NT = p.NT, d_.KC = p.KC, d_.bn = p.bn, d_.bk = p.bk, d_.SN = p.SN, d_.SG = p.SG;
        d_.tile_order = p.tile_order;
        qmm_ok_ = cuda::qmm_supported(p.bk, p.SG);
        const size_t nwords = static_cast<size_t>(p.NT * p.KC * 32 * 8);
        const size_t nscales = static_cast<size_t>(p.SN * p.SG);
        d_.words = static_cast<const uint32_t*>(be.weight_buffer(nwords * 4, random ? nullptr : p.words.data()));
        d_.scales = static_cast<const float*>(be.weight_buffer(nscales * 4, random ? nullptr : p.scales.data()));
        if (random) {
            const uint64_t seed = be.random_seed_for(fmt_ + std::to_string(reinterpret_cast<uintptr_t>(d_.words)));
            cuda::random_bits(const_cast<uint32_t*>(d_.words), static_cast<int64_t>(nwords), seed, 0xBFBFBFBFu,
                              be.stream());
            cuda::random_fill(const_cast<float*>(d_.scales), DType::F32, static_cast<int64_t>(nscales), seed + 1,
                              0.005f, 0.02f, be.stream());
        }
        w8a8_ = w8a8_requested() && wdt_ == DType::BF16 && p.bn == 128 && p.bk == 128 && p.K % 128 == 0;
        if (w8a8_) {
            // cuBLASLt reads the 128 x 128 scales with a row length padded to 4 (gemm_fp8_block.cu): a padded copy
            // where the checkpoint's rows are not (SG % 4 != 0), on the stream that filled the scales.
            ld_scales_ = (p.SG + 3) / 4 * 4;
            w8a8_scales_ = d_.scales;
            if (ld_scales_ != p.SG) {
                void* padded = be.weight_buffer(static_cast<size_t>(p.SN * ld_scales_) * 4, nullptr);
                GRIMOIRE_CUDA_CHECK(cudaMemsetAsync(padded, 0, static_cast<size_t>(p.SN * ld_scales_) * 4, be.stream()));
                GRIMOIRE_CUDA_CHECK(cudaMemcpy2DAsync(padded, static_cast<size_t>(ld_scales_) * 4, d_.scales,
                                                      static_cast<size_t>(p.SG) * 4, static_cast<size_t>(p.SG) * 4,
                                                      static_cast<size_t>(p.SN), cudaMemcpyDeviceToDevice, be.stream()));
                w8a8_scales_ = static_cast<const float*>(padded);
            }
        }
    }
    std::vector<float> dequantize() const override {
        PackedFp8 p;
        p.N = d_.N, p.K = d_.K, p.NT = d_.NT, p.KC = d_.KC, p.bn = d_.bn, p.bk = d_.bk, p.SN = d_.SN, p.SG = d_.SG;
        p.tile_order = d_.tile_order;
        download(d_.words, p.words, static_cast<size_t>(p.NT * p.KC * 32 * 8));
        download(d_.scales, p.scales, static_cast<size_t>(p.SN * p.SG));
        return unpack_fp8(p);
    }

    void prefetch(Backend& be) const override {
        be.l2_prefetch(d_.words, static_cast<size_t>(d_.NT * d_.KC * 32 * 8) * 4);
        be.l2_prefetch(d_.scales, static_cast<size_t>(d_.SN * d_.SG) * 4);
    }

  private:
    const void* id() const override { return d_.words; }
    void run_small(const Tensor& x,
                   Tensor& y,
                   const cuda::QmmWorkspace& ws,
                   cudaStream_t s,
                   const cuda::QmmParts* parts) const override {
        cuda::qmm_fp8(d_, x, y, ws, s, 0, parts);
    }
    void run_dequant(void* out, DType dt, cudaStream_t s) const override { cuda::dequant_fp8(d_, out, dt, s); }
    bool glu_ok(int64_t M) const override { return cuda::qmm_glu_ok(true, false, M, d_.N, d_.K, d_.bk, d_.SG); }
    bool conv_ok(int64_t M) const override { return cuda::qmm_conv_ok(true, false, M, d_.N, d_.K, d_.bk, d_.SG); }

    // One row: the MLP block as one persistent launch (cuda::mlp_fp8) where down is FP8 too and the kernel takes
    // the shapes, only with GRIMOIRE_MLP_FUSED=1 (which packs the weights the loader marks as the MLP's in the
    // orders the kernel reads, tile_order_for; the qmm kernels take them on their one-pass form). An opt-in until
    // measured faster end to end (docs/BENCHMARKS.md session 30).
    bool offers_mlp(int64_t rows, const Linear& down) const override {
        const auto* d = dynamic_cast<const CudaFp8Linear*>(&down);
        return mlp_enabled() && rows == 1 && d && wdt_ == DType::BF16 && qmm_ok_ && d->qmm_ok_ && !bias_.data &&
               !d->bias_.data && cuda::mlp_fp8_ok(d_, d->d_);
    }
    void forward_mlp(Backend& be, const Tensor& x, const Linear& down, Tensor& out) const override {
        CudaBackend& cb = cuda_of(be);
        if (!offers_mlp(x.rows(), down)) return Linear::forward_mlp(be, x, down, out);
        const cuda::Fp8Dev dd = static_cast<const CudaFp8Linear&>(down).d_;
        GRIMOIRE_CHECK(x.cols() == K_ && out.rows() == 1 && out.cols() == dd.N && out.dtype == cb.act_dtype(),
                       "quantized mlp (" + fmt_ + "): x or out does not fit the weights");
        Tensor h = cb.scratch(cb.act_dtype(), {1, dd.K});  // [1, I]
        const cuda::QmmWorkspace ws = workspace(cb);
        Tensor xv = x, yv = out;
        cb.record(cuda::KeyHasher().add(kOpMlp).add(xv).add(h).add(yv).add(id()).add(dd.words).h,
                  [this, dd, xv, h, yv, ws](cudaStream_t s) mutable { cuda::mlp_fp8(d_, dd, xv, h, yv, ws, s); });
    }
    // The residual add + RMSNorm in the same launch (cuda::MlpPreNorm): where the block is offered, the norm
    // takes the row (D <= 8192) and GRIMOIRE_MLP_FUSED_NORM=1 as well, so no kernel sits between the mixer's
    // output projection and the block's weight stream (H100, session 30: ~9 us an MLP layer for the add_rmsnorm
    // launch in between). Its own opt-in: H100, session 31, 97.1 us a 27B MLP layer against the library's 98.5, yet
    // 0.956 of the default 27B FP8 decode.
    bool offers_norm_mlp(int64_t rows, const Linear& down) const override {
        static const bool on = [] {
            const char* e = std::getenv("GRIMOIRE_MLP_FUSED_NORM");
            return e && e[0] == '1';
        }();
        return on && offers_mlp(rows, down) && cuda::mlp_fp8_prenorm_ok(K_);
    }
    void forward_norm_mlp(Backend& be, Tensor& res, const Tensor& y, const Tensor& norm_w, float eps, NormKind kind,
                          const Linear& down, Tensor& out) const override {
        CudaBackend& cb = cuda_of(be);
        // The kernel reads res, y and the weight as 16-byte vectors.
        auto a16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
        if (!offers_norm_mlp(res.rows(), down) || res.dtype != DType::BF16 || y.dtype != DType::BF16 ||
            norm_w.dtype != DType::F32 || norm_w.numel() != K_ || res.data == y.data || !a16(res.data) ||
            !a16(y.data) || !a16(norm_w.data))
            return Linear::forward_norm_mlp(be, res, y, norm_w, eps, kind, down, out);
        const cuda::Fp8Dev dd = static_cast<const CudaFp8Linear&>(down).d_;
        GRIMOIRE_CHECK(res.cols() == K_ && y.cols() == K_ && out.rows() == 1 && out.cols() == dd.N &&
                           out.dtype == cb.act_dtype(),
                       "quantized mlp (" + fmt_ + "): res, y or out does not fit the weights");
        Tensor h = cb.scratch(cb.act_dtype(), {1, dd.K});  // [1, I]
        const cuda::QmmWorkspace ws = workspace(cb);
        cuda::MlpPreNorm pre;
        pre.res = res, pre.y = y, pre.w = norm_w.ptr<float>(), pre.eps = eps;
        pre.w_offset = kind == NormKind::PLUS_ONE ? 1.0f : 0.0f;
        const uint64_t norm_key = std::bit_cast<uint32_t>(eps) | (uint64_t{kind == NormKind::PLUS_ONE} << 32);
        Tensor yv = out;
        cb.record(cuda::KeyHasher()
                      .add(kOpMlp + 1)
                      .add(pre.res)
                      .add(pre.y)
                      .add(norm_w)
                      .add(h)
                      .add(yv)
                      .add(id())
                      .add(dd.words)
                      .add(norm_key)
                      .h,
                  [this, dd, h, yv, ws, pre](cudaStream_t s) mutable {
                      cuda::mlp_fp8(d_, dd, Tensor{}, h, yv, ws, s, &pre);
                  });
    }
    static bool mlp_enabled() {
        static const bool on = [] {
            const char* e = std::getenv("GRIMOIRE_MLP_FUSED");
            return e && e[0] == '1';
        }();
        return on;
    }
    // The tile order of a weight (tile_layout.h TileOrder). With the fused MLP block, the weights the loader marks
    // as an MLP's (Fp8Host::role) in the orders the block reads: gate | up kNtMajorPaired where its halves are
    // whole n-tiles (GRIMOIRE_MLP_PAIRED=0: kNtMajor, the A/B), down kNtMajor. The others keep chunk-major: the
    // qmv kernel over kNtMajor was slightly slower (H100, session 30: 27B FP8 decode 0.843 against 0.854 of
    // roofline). GRIMOIRE_FP8_NT_MAJOR=1 packs every other weight kNtMajor (the layout's own A/B on the qmm
    // kernels), =paired kNtMajorPaired where N allows (so the GPU tests run every kernel over that order).
    static int tile_order_for(const Fp8Host& h) {
        if (mlp_enabled() && h.role == WeightRole::GLU_GATE_UP) {
            const char* e = std::getenv("GRIMOIRE_MLP_PAIRED");
            return h.N % 32 == 0 && !(e && e[0] == '0') ? kNtMajorPaired : kNtMajor;
        }
        if (mlp_enabled() && h.role == WeightRole::MLP_DOWN) return kNtMajor;
        const char* e = std::getenv("GRIMOIRE_FP8_NT_MAJOR");
        if (e && std::string(e) == "paired") return h.N % 32 == 0 ? kNtMajorPaired : kNtMajor;
        return e && e[0] == '1' ? kNtMajor : kChunkMajor;
    }

    // Prefill through the W8A8 FP8 GEMM, unless GRIMOIRE_FP8_GEMM=0 (read when a weight is loaded). The
    // activations are quantized to FP8 per 128 channels of a row, as HF transformers' FP8Linear and vLLM do for
    // these checkpoints (1..16 rows keep BF16 activations). H200, docs/BENCHMARKS.md session 24: the 27B gate_up
    // at M = 512 in 247 us against 371 us for the dequant pass + cuBLAS BF16 (233 us for the BF16 GEMM alone).
    static bool w8a8_requested() {
        const char* e = std::getenv("GRIMOIRE_FP8_GEMM");
        return !(e && e[0] == '0');
    }
    // The W8A8 prefill: the weight's codes unpacked to [N, K] in the dequant workspace (half its BF16 size), x
    // quantized per 128-channel block (quant_act_fp8), then cuBLASLt's block-scaled FP8 GEMM. Each part is its
    // own GEMM written straight into its tensor where the parts start on 128-row weight blocks and M is a multiple
    // of 4 (cuBLASLt's row count, padded); otherwise one GEMM into scratch [M4, N] and split_cols.
    bool prefill_parts(CudaBackend& cb, const Tensor& x, std::span<Tensor> ys) const override {
        const int64_t M = x.rows(), M4 = (M + 3) / 4 * 4;
        if (!w8a8_ || M <= cuda::kQmmMaxM || x.dtype != DType::BF16 || x.cols() != K_ || ys.empty()) return false;
        const size_t lt_bytes = CudaBackend::cublas_workspace_bytes();
        bool direct = M % 4 == 0;
        int64_t c0 = 0;
        for (const Tensor& y : ys) {
            if (y.dtype != DType::BF16 || y.rows() != M) return false;
            direct = direct && c0 % 128 == 0 && y.cols() % 16 == 0 && cuda::gemm_fp8_block_ok(M4, y.cols(), K_, lt_bytes);
            c0 += y.cols();
        }
        if (c0 != N_) return false;
        if (!direct && (N_ % 16 != 0 || ys.size() > static_cast<size_t>(cuda::kMaxSplitCols) ||
                        !cuda::gemm_fp8_block_ok(M4, N_, K_, lt_bytes)))
            return false;
        auto* wq = static_cast<uint8_t*>(cb.quant_ws(CudaBackend::QuantWs::DEQUANT));  // [N, K] e4m3
        const Tensor xq = cb.scratch(DType::U8, {M4, K_});                             // [M4, K] e4m3
        const Tensor xs = cb.scratch(DType::F32, {K_ / 128, M4});                      // [K / 128][M4] f32
        const Tensor yfull = direct ? Tensor{} : cb.scratch(DType::BF16, {M4, N_});    // [M4, N] BF16
        const std::vector<Tensor> parts(ys.begin(), ys.end());
        cuda::KeyHasher key;
        key.add(kOpW8a8).add(x).add(id()).add(xq).add(xs).add(yfull.data);
        for (const Tensor& p : parts) key.add(p);
        void* lt_ws = cb.cublas_workspace();
        cb.record(key.h, [this, x, wq, xq, xs, yfull, parts, direct, M, M4, lt_ws, lt_bytes](cudaStream_t s) {
            cuda::unpack_fp8(d_, wq, s);
            cuda::quant_act_fp8(x, M4, static_cast<uint8_t*>(xq.data), static_cast<float*>(xs.data), s);
            cuda::Fp8BlockGemm g;
            g.xq = static_cast<const uint8_t*>(xq.data), g.xs = static_cast<const float*>(xs.data);
            g.M4 = M4, g.K = K_, g.lt_ws = lt_ws, g.lt_ws_bytes = lt_bytes;
            if (direct) {
                int64_t r0 = 0;
                for (const Tensor& p : parts) {
                    g.wq = wq + r0 * K_, g.ws = w8a8_scales_ + (r0 / 128) * ld_scales_;
                    g.N = p.cols(), g.y = p.data;
                    cuda::gemm_fp8_block(g, s);
                    r0 += p.cols();
                }
                return;
            }
            g.wq = wq, g.ws = w8a8_scales_, g.N = N_, g.y = yfull.data;
            cuda::gemm_fp8_block(g, s);
            const Tensor rows(yfull.data, DType::BF16, Device::CUDA, {M, N_});  // the first M of M4 rows
            cuda::split_cols(rows, parts.data(), static_cast<int>(parts.size()), s);
        });
        return true;
    }

    cuda::Fp8Dev d_;
    bool w8a8_ = false;
    const float* w8a8_scales_ = nullptr;  // [SN][ld_scales_] f32: d_.scales, or its padded copy
    int64_t ld_scales_ = 0;
};

}  // namespace

std::unique_ptr<Linear> make_cuda_int4_linear(Backend& be, Int4Host w, Tensor bias, std::string format,
                                              size_t stored_bytes) {
    return std::make_unique<CudaInt4Linear>(cuda_of(be), std::move(w), bias, std::move(format), stored_bytes);
}

std::unique_ptr<Linear> make_cuda_fp8_linear(Backend& be, Fp8Host w, Tensor bias, std::string format,
                                             size_t stored_bytes) {
    return std::make_unique<CudaFp8Linear>(cuda_of(be), std::move(w), bias, std::move(format), stored_bytes);
}

}  // namespace grimoire
