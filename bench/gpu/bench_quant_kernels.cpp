// INT4 / FP8 quantized-weight kernels on the 27B layer shapes, against the limits measured in the same run:
// device copy bandwidth (read + write bytes / s) for the M = 1..16 kernels and the cuBLAS BF16 GEMM of the same
// shape for the prefill path (dequantize + GEMM; for FP8 also the W8A8 FP8 GEMM, the engine's FP8 prefill where
// cuBLASLt offers it: `fp8_prefill_*` is that one, `fp8_dequant_prefill_*` the dequant path's).
//
//   bench_quant_kernels [--out results.json] [--commit SHA] [--anchor torch_anchor.json]
//                       [--only int4|fp8[:SHAPE]] [--rows M,...]
// --only and --rows narrow the run for a profiler (ncu --launch-skip counts launches); the ratios need M = 1.
//
// Weights are random (packed words and scales filled on the device) and rotated over enough copies that
// every launch streams from HBM, not from the 50 MB L2. The prefill paths are also timed with the next weight's
// dequant / unpack on a second stream beside the GEMM (`*_prefill_<M>_overlap_*`, overlapped_ms): a probe for
// a prompt pipeline over the layers, not what the engine runs. One row is also timed between small ops
// (`*_M1_between_ops_us`, `*_m1_bw_between_ops_*`: each launch after an add + RMSNorm, the norm's own time
// subtracted), the neighbours it has in the decode step, beside the back-to-back record. Effective bandwidth = bytes the kernel must read
// (packed weights + scales + zeros) / time. --anchor merges the figures bench/gpu/anchor_torch_int4.py measured
// (torch._weight_int4pack_mm) in the same device session.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench_quant_weights.h"
#include "bench_util.h"
#include "core/error.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant.h"

using grimoire::DType;
using grimoire::Error;
using grimoire::Tensor;
using json = nlohmann::json;
namespace gc = grimoire::cuda;
using grimoire::bench::check;
using grimoire::bench::copy_bandwidth;
using grimoire::bench::dalloc;
using grimoire::bench::make_weights;
using grimoire::bench::QWeights;
using grimoire::bench::time_graph_ms;
using grimoire::bench::time_ms;

namespace {

struct Shape {
    const char* name;
    int64_t N, K;
};

// Two streams, one step per weight copy: `prep(i, buf, side)` readies weight copy i in buffer `buf` on the side
// stream while `use(i, buf, main)` consumes the one readied a step before on the main stream, with two buffers
// (a step's prep waits for the use that last read its buffer). Mean ms per step on the main stream over `reps`
// steps after 3 warm-up steps. The probe for a prompt pipeline where the next linear's dequant / unpack runs
// beside this one's GEMM (a memory-bound pass beside a compute-bound one): one step costs max(prep, use) where
// they overlap, prep + use where they do not.
double overlapped_ms(const std::function<void(int, int, cudaStream_t)>& prep,
                     const std::function<void(int, int, cudaStream_t)>& use, int reps) {
    cudaStream_t main_s, side;
    check(cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking), "stream");
    check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "stream");
    cudaEvent_t ready[2], used[2], e0, e1;
    for (int b = 0; b < 2; ++b) {
        cudaEventCreateWithFlags(&ready[b], cudaEventDisableTiming);
        cudaEventCreateWithFlags(&used[b], cudaEventDisableTiming);
    }
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    prep(0, 0, side);
    cudaEventRecord(ready[0], side);
    const int warm = 3;
    for (int i = 0; i < warm + reps; ++i) {
        if (i == warm) cudaEventRecord(e0, main_s);
        const int b = i % 2, nb = (i + 1) % 2;
        if (i >= 1) cudaStreamWaitEvent(side, used[nb], 0);  // step i - 1 read buffer nb
        prep(i + 1, nb, side);
        cudaEventRecord(ready[nb], side);
        cudaStreamWaitEvent(main_s, ready[b], 0);
        use(i, b, main_s);
        cudaEventRecord(used[b], main_s);
    }
    cudaEventRecord(e1, main_s);
    check(cudaEventSynchronize(e1), "overlap timing");
    check(cudaStreamSynchronize(side), "overlap side");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    for (int b = 0; b < 2; ++b) cudaEventDestroy(ready[b]), cudaEventDestroy(used[b]);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(main_s);
    cudaStreamDestroy(side);
    return ms / reps;
}

// The W8A8 FP8 prefill (CudaFp8Linear::prefill_parts, the default where cuBLASLt offers it) on the same weights and x:
// unpack the codes, quantize x per 128 channels, cuBLASLt's block-scaled FP8 GEMM; and the GEMM alone (weight
// already unpacked). Ratio to the same cuBLAS BF16 GEMM (tg_ms) as the dequant path's.
// False where cuBLASLt has no block-scaled FP8 GEMM (the engine then takes the dequant path).
bool w8a8_prefill(const QWeights& q, int copies, const Shape& sh, int M, void* xp, void* yp, double tg_ms, json& metrics,
                  json& ratios) {
    const size_t lt_bytes = 32ull << 20;
    if (M % 4 != 0 || !gc::gemm_fp8_block_ok(M, sh.N, sh.K, lt_bytes)) {
        std::printf("fp8 w8a8 prefill M %d: cuBLASLt has no block-scaled FP8 GEMM here\n", M);
        return false;
    }
    void* wq = dalloc(static_cast<size_t>(sh.N * sh.K));
    void* xq = dalloc(static_cast<size_t>(M) * sh.K);
    void* xs = dalloc(static_cast<size_t>(M) * (sh.K / 128) * 4);
    void* lt = dalloc(lt_bytes);
    const Tensor x(xp, DType::BF16, grimoire::Device::CUDA, {M, sh.K});
    gc::Fp8BlockGemm g;
    g.wq = static_cast<const uint8_t*>(wq), g.xq = static_cast<const uint8_t*>(xq), g.xs = static_cast<const float*>(xs);
    g.y = yp, g.M4 = M, g.N = sh.N, g.K = sh.K, g.lt_ws = lt, g.lt_ws_bytes = lt_bytes;
    gc::unpack_fp8(q.f8[0], static_cast<uint8_t*>(wq), nullptr);
    gc::quant_act_fp8(x, M, static_cast<uint8_t*>(xq), static_cast<float*>(xs), nullptr);
    g.ws = q.f8[0].scales;
    const double t_gemm = time_ms([&](int) { gc::gemm_fp8_block(g, nullptr); }, 10);
    const double t_all = time_ms(
        [&](int i) {
            const gc::Fp8Dev& d = q.f8[static_cast<size_t>(i % copies)];
            g.ws = d.scales;
            gc::unpack_fp8(d, static_cast<uint8_t*>(wq), nullptr);
            gc::quant_act_fp8(x, M, static_cast<uint8_t*>(xq), static_cast<float*>(xs), nullptr);
            gc::gemm_fp8_block(g, nullptr);
        },
        10);
    // The next weight's unpack beside this one's activation quantization and GEMM (overlapped_ms).
    void* wq2[2] = {wq, dalloc(static_cast<size_t>(sh.N * sh.K))};
    const double t_over = overlapped_ms(
        [&](int i, int b, cudaStream_t st) {
            gc::unpack_fp8(q.f8[static_cast<size_t>(i % copies)], static_cast<uint8_t*>(wq2[b]), st);
        },
        [&](int i, int b, cudaStream_t st) {
            gc::Fp8BlockGemm gi = g;
            gi.wq = static_cast<const uint8_t*>(wq2[b]);
            gi.ws = q.f8[static_cast<size_t>(i % copies)].scales;
            gc::quant_act_fp8(x, M, static_cast<uint8_t*>(xq), static_cast<float*>(xs), st);
            gc::gemm_fp8_block(gi, st);
        },
        10);
    cudaFree(wq2[1]);
    const std::string k = "fp8_prefill_" + std::to_string(M);
    metrics[k + "_overlap_us"] = t_over * 1e3;
    ratios[k + "_overlap_vs_cublas"] = tg_ms / t_over;
    std::printf("fp8 w8a8 prefill M %4d, next unpack beside the GEMM: %.1f us a weight: %.2f of cuBLAS BF16\n", M,
                t_over * 1e3, tg_ms / t_over);
    metrics[k + "_us"] = t_all * 1e3;
    metrics["fp8_w8a8_gemm_" + std::to_string(M) + "_us"] = t_gemm * 1e3;
    metrics["fp8_w8a8_gemm_" + std::to_string(M) + "_TFLOPs"] = 2.0 * M * sh.N * sh.K / (t_gemm * 1e-3) / 1e12;
    ratios[k + "_vs_cublas"] = tg_ms / t_all;
    std::printf("fp8 w8a8 prefill M %4d: %.1f us (GEMM alone %.1f us, %.0f TFLOP/s) vs cuBLAS BF16 %.1f us: %.2f\n", M,
                t_all * 1e3, t_gemm * 1e3, 2.0 * M * sh.N * sh.K / (t_gemm * 1e-3) / 1e12, tg_ms * 1e3, tg_ms / t_all);
    for (void* p : {wq, xq, xs, lt}) cudaFree(p);
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    std::string out_path, commit = "unknown", anchor_path, command = "bench_quant_kernels", only;
    std::vector<int> rows = {1, 2, 4, 8, 16};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        command += " " + a;
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) throw Error("missing value for " + a);
            command += std::string(" ") + argv[i + 1];
            return argv[++i];
        };
        if (a == "--out") out_path = val();
        else if (a == "--commit") commit = val();
        else if (a == "--anchor") anchor_path = val();
        else if (a == "--only") only = val();  // "<int4|fp8>:<shape>" (profiling runs), or a format's shapes
        else if (a == "--rows") {                // "1,16": only these M (profiling runs: ncu's launch indices)
            rows.clear();
            const std::string v = val();
            for (size_t p = 0; p < v.size();) {
                const size_t e = v.find(',', p);
                rows.push_back(std::stoi(v.substr(p, e - p)));
                p = e == std::string::npos ? v.size() : e + 1;
            }
        } else {
            std::fprintf(stderr,
                         "usage: bench_quant_kernels [--out FILE] [--commit SHA] [--anchor FILE] [--only FMT[:SHAPE]] "
                         "[--rows M,...]\n");
            return 2;
        }
    }
    try {
        json metrics, ratios;
        const double bw = copy_bandwidth();
        metrics["copy_bandwidth_GBps"] = bw / 1e9;
        std::printf("copy bandwidth (read+write): %.0f GB/s\n", bw / 1e9);

        const Shape shapes[] = {{"gate_up", 34816, 5120}, {"down", 5120, 17408}, {"q_gate", 12288, 5120},
                                {"gdn_qkv", 10240, 5120}, {"o_proj", 5120, 6144}, {"lm_head", 248320, 5120}};
        const size_t rot_bytes = 400ull << 20;  // > 8x the L2: every launch reads HBM
        // x: random BF16 in [-1, 1] like the activations of a decode step (GRIMOIRE_BENCH_XCONST=1: every element
        // 0x3c3c, the records before session 10).
        void* xbuf = dalloc(16 * 17408 * 2);
        const char* xconst = std::getenv("GRIMOIRE_BENCH_XCONST");
        if (xconst && xconst[0] == '1')
            check(cudaMemset(xbuf, 0x3c, 16 * 17408 * 2), "memset");
        else
            gc::random_fill(xbuf, DType::BF16, 16 * 17408, 9, 1.0f, 0.0f, nullptr);
        void* ybuf = dalloc(16 * 248320 * 4);
        // The small op between one-row launches (see "between small ops" below): add + RMSNorm of a 5120 row.
        void* nbuf = dalloc(4 * 5120 * 2);
        gc::random_fill(nbuf, DType::BF16, 4 * 5120, 11, 1.0f, 0.0f, nullptr);
        auto* nb = static_cast<uint16_t*>(nbuf);
        Tensor nres(nb, DType::BF16, grimoire::Device::CUDA, {1, 5120});
        Tensor nadd(nb + 5120, DType::BF16, grimoire::Device::CUDA, {1, 5120});
        Tensor nw(nb + 2 * 5120, DType::BF16, grimoire::Device::CUDA, {5120});
        Tensor nout(nb + 3 * 5120, DType::BF16, grimoire::Device::CUDA, {1, 5120});
        // Pass 0: M = 1..16 on every shape; pass 1: the prefill comparison on gate_up. The cuBLAS GEMMs run
        // last because the card comes out of them with lower clocks for a while: measured right after them
        // (before session 20 they ran between gate_up and down), the one-row down read 19.6 us / 0.55 of copy
        // where it reads 15.9 us / 0.67 alone (H200, session 20).
        for (const auto& [pass, fp8] :
             std::initializer_list<std::pair<int, bool>>{{0, false}, {0, true}, {1, false}, {1, true}}) {
            const std::string fmt = fp8 ? "fp8" : "int4";
            for (const Shape& sh : shapes) {
                if (!only.empty() && only != fmt + ":" + sh.name && only != fmt) continue;
                if (pass == 1 && std::string(sh.name) != "gate_up") continue;
                const size_t one = static_cast<size_t>(sh.N * sh.K) / (fp8 ? 1 : 2);
                const int copies = static_cast<int>(std::max<size_t>(1, (rot_bytes + one - 1) / one));
                QWeights q;
                make_weights(q, fp8, sh.N, sh.K, copies);
                size_t pb = 0;
                int nc = 0;
                gc::qmm_workspace_need(sh.N, sh.K, &pb, &nc);
                gc::QmmWorkspace ws;
                ws.partials = static_cast<float*>(dalloc(pb)), ws.partial_bytes = pb;
                ws.counters = static_cast<int*>(dalloc(static_cast<size_t>(nc) * 4)), ws.n_counters = nc;
                check(cudaMemset(ws.counters, 0, static_cast<size_t>(nc) * 4), "memset");
                const std::string tag = std::to_string(sh.N) + "x" + std::to_string(sh.K);
                double t1 = 0;
                for (int M : rows) {
                    if (pass == 1) break;
                    Tensor x(xbuf, DType::BF16, grimoire::Device::CUDA, {M, sh.K});
                    Tensor y(ybuf, DType::BF16, grimoire::Device::CUDA, {M, sh.N});
                    const double ms = time_ms(
                        [&](int i) {
                            if (fp8) gc::qmm_fp8(q.f8[static_cast<size_t>(i % copies)], x, y, ws, nullptr);
                            else gc::qmm_int4(q.i4[static_cast<size_t>(i % copies)], x, y, ws, nullptr);
                        },
                        std::max(20, 2 * copies));
                    // The same launches replayed from a CUDA graph, as the decode step runs them.
                    const double gms = time_graph_ms(
                        [&](int i, cudaStream_t st) {
                            if (fp8) gc::qmm_fp8(q.f8[static_cast<size_t>(i % copies)], x, y, ws, st);
                            else gc::qmm_int4(q.i4[static_cast<size_t>(i % copies)], x, y, ws, st);
                        },
                        std::max(20, 2 * copies));
                    metrics[fmt + "_" + sh.name + "_M" + std::to_string(M) + "_graph_us"] = gms * 1e3;
                    const double ebw = static_cast<double>(q.bytes) / (ms * 1e-3);
                    metrics[fmt + "_" + sh.name + "_M" + std::to_string(M) + "_us"] = ms * 1e3;
                    if (M == 1) {
                        t1 = ms;
                        metrics[fmt + "_m1_GBps_" + tag] = ebw / 1e9;
                        ratios[fmt + "_m1_bw_" + tag] = ebw / bw;
                    }
                    if (M == 16 && t1 > 0) ratios[fmt + "_m16_over_m1_" + tag] = ms / t1;
                    std::printf("%s %-8s %6lld x %-6lld M %2d: %8.2f us  %6.0f GB/s  (%.2f of copy); graph %8.2f us (%.2f)\n",
                                fmt.c_str(), sh.name, static_cast<long long>(sh.N), static_cast<long long>(sh.K), M,
                                ms * 1e3, ebw / 1e9, ebw / bw, gms * 1e3, static_cast<double>(q.bytes) / (gms * 1e-3) / bw);
                }
                // One row between small ops, as the decode step runs it: each launch follows an add + RMSNorm of one
                // 5120-wide row (launched ahead as the backend does before a linear), graph-replayed; the norm's own
                // time alone is subtracted. Back-to-back launches of one weight (above) put a big kernel's tail
                // after each, which the step never does (session 25: FP8 one row's early launch).
                if (pass == 0) {
                    Tensor x(xbuf, DType::BF16, grimoire::Device::CUDA, {1, sh.K});
                    Tensor y(ybuf, DType::BF16, grimoire::Device::CUDA, {1, sh.N});
                    const bool ahead = gc::pdl_ahead_enabled();
                    auto norm = [&](cudaStream_t st) { gc::add_rmsnorm(nres, nadd, nw, 1e-6f, grimoire::NormKind::PLUS_ONE, nout, st, ahead); };
                    const int reps = std::max(20, 2 * copies);
                    const double t_norm = time_graph_ms([&](int, cudaStream_t st) { norm(st); }, reps);
                    const double t_both = time_graph_ms(
                        [&](int i, cudaStream_t st) {
                            norm(st);
                            if (fp8) gc::qmm_fp8(q.f8[static_cast<size_t>(i % copies)], x, y, ws, st);
                            else gc::qmm_int4(q.i4[static_cast<size_t>(i % copies)], x, y, ws, st);
                        },
                        reps);
                    const double t_one = t_both - t_norm;
                    metrics[fmt + "_" + sh.name + "_M1_between_ops_us"] = t_one * 1e3;
                    metrics[fmt + "_" + sh.name + "_M1_norm_alone_us"] = t_norm * 1e3;
                    ratios[fmt + "_m1_bw_between_ops_" + tag] = static_cast<double>(q.bytes) / (t_one * 1e-3) / bw;
                    std::printf("%s %-8s M  1 between small ops: %8.2f us (%.2f of copy; the norm alone %.2f us)\n",
                                fmt.c_str(), sh.name, t_one * 1e3, static_cast<double>(q.bytes) / (t_one * 1e-3) / bw,
                                t_norm * 1e3);
                }
                // Prefill on gate_up: dequantize to BF16 + cuBLAS vs cuBLAS on a BF16 weight alone. The
                // anchor multiplies the same inputs as the measured path (x random, the weight the
                // dequantized random one), so the ratio prices the dequant pass alone: cuBLAS runs faster on
                // constant data (the tensor cores' power depends on it), which before session 8 the anchor
                // had; that figure is kept as cublas_bf16_const_*.
                if (pass == 1) {
                    cublasHandle_t h;
                    cublasCreate(&h);
                    void* wd = dalloc(static_cast<size_t>(sh.N * sh.K) * 2);
                    for (int M : {512, 4096}) {
                        void* xp = dalloc(static_cast<size_t>(M) * sh.K * 2);
                        void* yp = dalloc(static_cast<size_t>(M) * sh.N * 2);
                        const float al = 1, be0 = 0;
                        // y = x w^T through cuBLAS BF16, on the handle's stream; w = wd but in the overlap probe.
                        auto gemm = [&](const void* w = nullptr) {
                            cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(sh.N), M, static_cast<int>(sh.K),
                                         &al, w ? w : wd, CUDA_R_16BF, static_cast<int>(sh.K), xp, CUDA_R_16BF,
                                         static_cast<int>(sh.K), &be0, yp, CUDA_R_16BF, static_cast<int>(sh.N),
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                        };
                        check(cudaMemset(wd, 0x3c, static_cast<size_t>(sh.N * sh.K) * 2), "memset");
                        check(cudaMemset(xp, 0x3c, static_cast<size_t>(M) * sh.K * 2), "memset");
                        const double tc = time_ms([&](int) { gemm(); }, 10);
                        gc::random_fill(xp, DType::BF16, static_cast<int64_t>(M) * sh.K, 500 + M, 1.0f, 0.0f,
                                        nullptr);
                        if (fp8)
                            gc::dequant_fp8(q.f8[0], wd, DType::BF16, nullptr);
                        else
                            gc::dequant_int4(q.i4[0], wd, DType::BF16, nullptr);
                        const double tg = time_ms([&](int) { gemm(); }, 10);
                        // Weight copy i dequantized to BF16 into out, on stream st.
                        auto dequant = [&](int i, void* out, cudaStream_t st) {
                            const size_t c = static_cast<size_t>(i % copies);
                            if (fp8) gc::dequant_fp8(q.f8[c], out, DType::BF16, st);
                            else gc::dequant_int4(q.i4[c], out, DType::BF16, st);
                        };
                        const double tq = time_ms(
                            [&](int i) {
                                dequant(i, wd, nullptr);
                                gemm();
                            },
                            10);
                        // The same dequant + GEMM with the next weight's dequant beside this one's GEMM (two
                        // BF16 buffers; overlapped_ms): what a prompt pipeline over the layers could reach.
                        void* wd2[2] = {wd, dalloc(static_cast<size_t>(sh.N * sh.K) * 2)};
                        const double to = overlapped_ms(
                            [&](int i, int b, cudaStream_t st) { dequant(i, wd2[b], st); },
                            [&](int, int b, cudaStream_t st) {
                                cublasSetStream(h, st);
                                gemm(wd2[b]);
                            },
                            10);
                        cublasSetStream(h, nullptr);
                        cudaFree(wd2[1]);
                        const std::string k = (fp8 ? "fp8_dequant" : fmt) + "_prefill_" + std::to_string(M);
                        metrics[k + "_overlap_us"] = to * 1e3;
                        ratios[k + "_overlap_vs_cublas"] = tg / to;
                        std::printf("%s prefill M %4d, next dequant beside the GEMM: %.1f us a weight: %.2f of "
                                    "cuBLAS\n",
                                    fmt.c_str(), M, to * 1e3, tg / to);
                        metrics[k + "_us"] = tq * 1e3;
                        metrics["cublas_bf16_" + std::to_string(M) + "x" + tag + "_us"] = tg * 1e3;
                        metrics["cublas_bf16_const_" + std::to_string(M) + "x" + tag + "_us"] = tc * 1e3;
                        metrics["cublas_bf16_" + std::to_string(M) + "_TFLOPs"] = 2.0 * M * sh.N * sh.K / (tg * 1e-3) / 1e12;
                        ratios[k + "_vs_cublas"] = tg / tq;
                        std::printf(
                            "%s prefill M %4d on %s: %.1f us vs cuBLAS BF16 %.1f us (%.0f TFLOP/s; constant "
                            "data "
                            "%.1f us): %.2f\n",
                            fmt.c_str(), M, tag.c_str(), tq * 1e3, tg * 1e3,
                            2.0 * M * sh.N * sh.K / (tg * 1e-3) / 1e12, tc * 1e3, tg / tq);
                        if (fp8 && !w8a8_prefill(q, copies, sh, M, xp, yp, tg, metrics, ratios)) {
                            metrics["fp8_prefill_" + std::to_string(M) + "_us"] = tq * 1e3;
                            ratios["fp8_prefill_" + std::to_string(M) + "_vs_cublas"] = tg / tq;
                        }
                        cudaFree(xp);
                        cudaFree(yp);
                    }
                    cudaFree(wd);
                    cublasDestroy(h);
                }
                cudaFree(ws.partials);
                cudaFree(ws.counters);
            }
        }
        if (!anchor_path.empty()) {
            std::ifstream f(anchor_path);
            if (f) {
                json a = json::parse(f);
                for (auto& [k, v] : a["metrics"].items()) metrics["anchor_" + k] = v;
                if (a["metrics"].contains("torch_int4pack_m1_GBps_34816x5120"))
                    ratios["anchor_torch_int4_m1_bw_34816x5120"] =
                        a["metrics"]["torch_int4pack_m1_GBps_34816x5120"].get<double>() * 1e9 / bw;
                if (a["metrics"].contains("torch_int4pack_m16_over_m1_34816x5120"))
                    ratios["anchor_torch_int4_m16_over_m1_34816x5120"] = a["metrics"]["torch_int4pack_m16_over_m1_34816x5120"];
            } else {
                std::printf("no anchor file %s\n", anchor_path.c_str());
            }
        }
        grimoire::bench::write_record(metrics, ratios, commit, command, out_path);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_quant_kernels: %s\n", e.what());
        return 1;
    }
    return 0;
}
