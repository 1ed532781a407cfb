// Quantized weight (INT4 group-quantized or FP8 E4M3) x activations for M = 1..16 rows (decode, concurrent
// users, speculative verify): the launchers around quant_mma.cuh's kernel and the split-K workspace sizing.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kernels/cuda/qmv_cap.h"
#include "kernels/cuda/quant_mma_tma.cuh"
#include "kernels/cuda/quant_qmv.cuh"

namespace grimoire::cuda {

namespace qmm {
int device_sms() {
    static int sms = [] {
        const int n = device_attr(cudaDevAttrMultiProcessorCount);
        return n > 0 ? n : 132;
    }();
    return sms;
}
}  // namespace qmm

// Partials: [grid block][2][M][kColBlock] f32 for at most kMaxBlocksPerSm blocks per SM, then the BF16 copy
// of x [M][K rounded to 64] when x needs converting, the act-order gather or the qmv kernel's fragment order;
// counters: one per column block of the stream-K kernels (the first NT / 16 of one per n-tile).
constexpr int kMaxBlocksPerSm = 8;

size_t partials_region() {
    return static_cast<size_t>(qmm::device_sms()) * kMaxBlocksPerSm * 2 * kQmmMaxM * qmm::kColBlock * 4;
}

void qmm_workspace_need(int64_t N, int64_t K, size_t* partial_bytes, int* n_counters) {
    const int64_t NT = (N + 15) / 16;
    *partial_bytes =
        partials_region() + static_cast<size_t>(kQmmMaxM) * static_cast<size_t>((K + 63) / 64 * 64) * 2;
    *n_counters = static_cast<int>(NT);
}

bool qmm_supported(int64_t group_size, int64_t G) {
    return G <= 1 || group_size == 16 || group_size == 32 || (group_size > 0 && group_size % 64 == 0);
}

namespace {

// x [M, K] (BF16 or F32, any alignment) -> BF16 [M][ldx] in the kernel's channel order, zeros past K: the
// act-order permutation (perm) applied, and with `slots` the chunk permutation of a chunk-permuted weight
// (quant/tile_layout.h: position k holds the channel of k-slot k, as the M <= 16 stream-K kernels read x by
// k-slot; the qmv kernel reads x in its own order).
__global__ void prep_x_kernel(
    const void* x, int xdt, const int32_t* perm, bool slots, int M, int K, int ldx, uint16_t* out) {
    const int64_t n = static_cast<int64_t>(M) * ldx;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int r = static_cast<int>(i / ldx), k = static_cast<int>(i - static_cast<int64_t>(r) * ldx);
        const int ch = slots ? (k & ~63) + chunk_channel(k & 63) : k;
        float v = 0.0f;
        if (ch < K) v = ld(x, xdt, static_cast<int64_t>(r) * K + (perm ? perm[ch] : ch));
        out[i] = __bfloat16_as_ushort(__float2bfloat16(v));
    }
}

// One launch of a qmm kernel, as a programmatic dependent launch (may start while its predecessor runs) when
// `pdl`.
template <class Kernel>
void launch_ex(Kernel kernel, const qmm::Args& a, int blocks, int threads, size_t smem, bool pdl, cudaStream_t s) {
    launch_pdl_if(pdl, kernel, dim3(static_cast<unsigned>(blocks)), dim3(static_cast<unsigned>(threads)), smem, s, a);
}

// Which weights take the Hopper kernel (quant_mma_tma.cuh) on sm_90. Measured on the H200 (docs/BENCHMARKS.md,
// session 5) against the cp.async kernel at the six 27B shapes x M = 1, 2, 4, 8, 16: FP8 0.75-0.98x the time
// at 26 of the 30 points (1.04-1.17x at q_gate M = 1-2, gdn_qkv M = 2, lm_head M = 16); INT4 1.0-2.4x at 28
// of 30 (its dequant needs more instructions per byte than 15 consumer warps issue in time).
// GRIMOIRE_QMM_TMA=0: never; =all: INT4 too.
bool use_tma(bool fp8) {
    static const int mode = [] {  // 0 never, 1 FP8, 2 every format
        const char* e = std::getenv("GRIMOIRE_QMM_TMA");
        if (!device_is_hopper() || (e && std::string(e) == "0")) return 0;
        return e && std::string(e) == "all" ? 2 : 1;
    }();
    return mode == 2 || (mode == 1 && fp8);
}

// One block per SM, each an equal contiguous range of steps; PDL on (the producer issues the first stages'
// weights before waiting on the predecessor).
template <bool FP8, int MT, bool ASYM, int GK>
void launch_tma(qmm::Args& a, int forced_blocks, cudaStream_t s) {
    auto kernel = qmm::qmm_tma_kernel<FP8, MT, ASYM, GK>;
    const size_t smem = qmm::plan_stage_tma(a, FP8);
    static const bool attr_set = [&] {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(qmm::kTmaSmem));
        return true;
    }();
    (void)attr_set;
    static const int env_steps = [] {
        const char* e = std::getenv("GRIMOIRE_QMM_MIN_STEPS");
        return e && std::atoi(e) > 0 ? std::atoi(e) : 0;
    }();
    const int min_steps = env_steps > 0 ? env_steps : 4;
    constexpr int ntb = qmm::tma_ntb(FP8);
    a.W = static_cast<int>((a.NT + ntb - 1) / ntb) * a.KC;  // steps over this kernel's column blocks
    int blocks = forced_blocks > 0 ? forced_blocks : qmm::device_sms();
    if (forced_blocks <= 0 && blocks > a.W / min_steps) blocks = a.W / min_steps;
    if (blocks < 1) blocks = 1;
    if (blocks > a.W) blocks = a.W;
    if (static_cast<size_t>(blocks) * 2 * a.M * ntb * 16 * 4 > partials_region())
        throw Error("cuda qmm: more grid blocks than the partials workspace holds");
    launch_ex(kernel, a, blocks, qmm::kTmaThreads, smem, true, s);
}

// Which formats may take the one-to-eight-row kernel (quant_qmv.cuh; whole-chunk scale groups only).
// GRIMOIRE_QMV=0: none (the M = 1..16 kernels take every M), =int4 / =fp8: that format only.
bool use_qmv(bool fp8) {
    static const int mode = [] {  // bit 0: INT4, bit 1: FP8
        const char* e = std::getenv("GRIMOIRE_QMV");
        if (!e) return 3;
        const std::string v(e);
        return v == "0" ? 0 : v == "int4" ? 1 : v == "fp8" ? 2 : 3;
    }();
    return (mode >> (fp8 ? 1 : 0)) & 1;
}

// INT4 weights take the kernel with its scale (and zero-point) table staged in shared memory (quant_qmv.cuh
// SSM); FP8 keeps the per-group scale loads. Measured on the H200 in one call (docs/BENCHMARKS.md, session
// 9): staged INT4 was faster on all six 27B shapes at one, four and eight rows (one row: gate_up 31.4 -> 29.3
// us, down 20.0 -> 17.4, q_gate 12.1 -> 11.1); FP8, whose scale is one f32 per 128x128 block, was mixed
// (lm_head 297 -> 336 us, o_proj 11.7 -> 11.2).
constexpr bool qmv_ssm(bool fp8) {
    return !fp8;
}

// One row of a weight with at least 4 n-tiles per SM takes the 2..16-row form of the kernel (B words straight
// from x, two-tile blocks), when x is whole chunks; else the staged-x form (x and its chunk sums copied into
// shared memory), also under GRIMOIRE_QMV_ONEROW=1 (the A/B). Measured on the H200 in one call
// (docs/BENCHMARKS.md, session 10; staged / 2..16-row form, us): INT4 gate_up 28.7 / 28.0, q_gate 10.6 / 10.2;
// FP8 gate_up 53.3 / 48.4, q_gate 19.7 / 17.9, gdn_qkv 18.6 / 16.9; but on the 320-n-tile weights INT4 down 16.0
// / 16.7, FP8 down 27.9 / 29.0. (INT4 one row from 4 to 8 n-tiles per SM takes the staged blocks anyway since
// session 17: launch_qmv_ssz.)
bool qmv_staged_x(const qmm::Args& a) {
    static const bool forced = [] {
        const char* e = std::getenv("GRIMOIRE_QMV_ONEROW");
        return e && e[0] == '1';
    }();
    return a.M == 1 && (forced || a.ldx % 64 != 0 || a.NT < 4 * qmm::device_sms());
}

// The most dynamic shared memory a launch may take (qmv_smem, or with the staged scale table for at most two
// n-tiles): with x staged for one row (the route is decided before x's stride is known).
size_t qmv_launch_smem(const qmm::Args& a, bool fp8, bool asym) {
    const bool staged = a.M == 1;
    return qmv_ssm(fp8) ? qmm::qmv_smem_ssm(a, 2, asym, staged) : qmm::qmv_smem(a, staged);
}

// A qmv launch of one wave at MINB blocks a SM asks for enough dynamic shared memory that no more than MINB
// of its blocks fit an SM. Why: launched early (programmatic dependents) behind a grid that frees every SM at
// about once (the same weight back to back), the one-tile FP8 blocks of down and o_proj (320) landed four to
// an SM as room opened, crowding ~85 SMs (traced on an H100, session 46: blocks per SM p50 3 -> 4, each
// block's loop p50 27.2 -> 36.4 us on down); at MINB a SM they cover at least NT / MINB SMs. Only one-wave
// grids: a larger grid keeps every SM busy however its blocks land, and the cap would only cut its occupancy.
// Measured on the H100 (session 46, bench/results/qmv_cap_*_h100.json, alternated twice in one call), us at
// one row: FP8 down 44.4 / 43.9 -> 36.4 / 36.4, o_proj 15.2 / 15.3 -> 13.5 / 13.3, the other shapes, INT4 and
// the launches between small ops unchanged (+-1%); the 27B FP8 decode 0.859 / 0.860 -> 0.861 / 0.862 of
// roofline. INT4 one row on the same weights does not move: its one-tile blocks already fit only three to an
// SM by registers (79-80 a thread x 256 threads = 20,480 a block, cuobjdump --dump-resource-usage), where the
// FP8 one-tile kernel's 58 (allocated as 64: 16,384 a block) let four fit in the SM's 65,536. One row only:
// capping the 2..16-row grids (verify, concurrent users) too was slower where it pads (H100, session 49,
// bench/results/qmv_cap_rows_h100.json: INT4 down +9% / +8% at 4 / 8 rows, o_proj +6%, FP8 down +4-5%) and
// equal elsewhere. GRIMOIRE_QMV_CAP=0 launches at the kernel's own size (the A/B), GRIMOIRE_QMV_CAP=all caps
// the qmv grids at every row count (that A/B, still to be run on an H200). `smem`: the launch's own need,
// `static_bytes` the kernel's static shared memory; returns `smem` or the padded size.
constexpr size_t kQmvCapUnknown = static_cast<size_t>(-1);  // a kernel whose static shared memory is unknown
size_t qmv_cap_smem(size_t static_bytes, size_t smem, int rows, int minb, int blocks, size_t max_dyn) {
    static const int cap = [] {  // 0 off, 1 one row, 2 every row count
        const char* e = std::getenv("GRIMOIRE_QMV_CAP");
        if (e && e[0] == '0') return 0;
        return e && std::string_view(e) == "all" ? 2 : 1;
    }();
    if (cap == 0 || (cap == 1 && rows != 1) || static_bytes == kQmvCapUnknown ||
        blocks > minb * qmm::device_sms())
        return smem;
    static const int per_sm = device_attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor),
                     reserved = device_attr(cudaDevAttrReservedSharedMemoryPerBlock);
    if (per_sm <= 0 || reserved < 0) return smem;
    return qmv_cap_bytes(smem, static_bytes, static_cast<size_t>(per_sm), static_cast<size_t>(reserved), minb,
                         max_dyn);
}

template <bool FP8,
          bool ASYM,
          int SSZ,
          int NTB,
          int D,
          int MINB,
          bool MULTI,
          int MAXM = 8,
          int STAGE = 0,
          bool WSM = false>
void launch_qmv_m(qmm::Args& a, cudaStream_t s) {
    constexpr bool kSsm = qmv_ssm(FP8);
    auto kernel = qmm::qmv_kernel<FP8, ASYM, SSZ, NTB, D, MINB, MULTI, STAGE, kSsm, MAXM, WSM>;
    // Once per kernel: its dynamic shared-memory limit set, and its static shared memory read for
    // qmv_cap_smem (kQmvCapUnknown if the query fails: then no cap, the launch at its own size).
    static const size_t static_smem = [&] {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(qmm::qmv_max_dyn_smem(STAGE)));
        cudaFuncAttributes fa{};
        return cudaFuncGetAttributes(&fa, kernel) == cudaSuccess ? fa.sharedSizeBytes : kQmvCapUnknown;
    }();
    const int blocks = (a.NT + NTB - 1) / NTB;
    const size_t smem =
        qmv_cap_smem(static_smem,
                     WSM ? qmm::qmv_ring_offset(a, NTB, ASYM, !MULTI, kSsm) + qmm::qmv_ring_bytes(D, NTB, FP8)
                     : kSsm ? qmm::qmv_smem_ssm(a, NTB, ASYM, !MULTI)
                            : qmm::qmv_smem(a, !MULTI),
                     a.M, MINB, blocks, qmm::qmv_max_dyn_smem(STAGE));
    launch_ex(kernel, a, blocks, qmm::kQmvThreads, smem, device_is_hopper(), s);
}

// INT4 x's group sums (the zero point's term: sum_k (q_k - z) x_k = sum_k (128 + q_k) x_k - (128 + z) sum_k
// x_k) by two all-ones mma a k-tile whose A fragment is x's words as loaded (quant_qmv.cuh kQmvXsumQuad), at
// every row count. At 9..16 rows it replaces one mma a k-tile with x as A, whose A fragment takes one
// register from each B operand and so costs four register moves a k-tile (the loop's SASS per two chunks: 342
// -> 320 instructions on the wide-weight form, 362 -> 335 two tiles, 196 -> 167 one tile); at one row (x
// staged, kQmvMmaSum) and 2..8 rows it replaces four all-ones-A mma a chunk by two (one-row loop 181 -> 172).
// Another fp32 order of the same sums. Measured, the library A/B alternated twice in one call
// (docs/BENCHMARKS.md sessions 39-40; bench/results/qmv_xsumq_library_h200.json, qmv_xsumq_rows_h100.json,
// qmv_m16_xsumq_h100.json):
//   * H200: one row 0-3.9% faster (down 16.31 -> 15.72 us), 2..16 rows 0.5-4.2% faster (lm_head at four rows
//     -3.7%) but o_proj at eight rows 2% slower; the 27B INT4 step 5.28 -> 5.20 ms (decode_ctx512_roofline
//     0.688 -> 0.700).
//   * H100: one row 0.1-1.5% faster, 9..16 rows 1.4-3.3% (gate_up 41.8 -> 40.7 us), but the one-tile 2..8-row
//     form (down, o_proj) 0-2.2% slower; the 27B INT4 step 6.36 -> 6.31 ms. The H200 is the reference card,
//     so every form takes the new sums.
// GRIMOIRE_QMV_XSUMQ=0 keeps the earlier sums (the A/B). It replaced GRIMOIRE_QMV_MSUM=0, the one-row chunk
// sums computed while staging x (session 13, H200: 4-5% slower than the mma sums on every 27B shape).
bool qmv_xsumq() {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_QMV_XSUMQ");
        return !(e && e[0] == '0');
    }();
    return on;
}
// One row (x staged; the group sums from the mma, kQmvMmaSum).
template <bool ASYM, int SSZ, int NTB, int D, int MINB, int STAGE = 0>
void launch_qmv_row(qmm::Args& a, cudaStream_t s) {
    constexpr int kSum = STAGE | qmm::kQmvMmaSum;
    qmv_xsumq() ? launch_qmv_m<false, ASYM, SSZ, NTB, D, MINB, false, 8, kSum | qmm::kQmvXsumQuad>(a, s)
                : launch_qmv_m<false, ASYM, SSZ, NTB, D, MINB, false, 8, kSum>(a, s);
}
// INT4 one row on one-tile blocks whose warps walk at most kQmvDeep chunks (K <= 6144: the 27B out_proj and
// o_proj, which run right after the mixers): with GRIMOIRE_QMV_DEEP=1 every chunk's weights are asked for
// before the programmatic-launch wait, into each warp's shared-memory ring (quant_qmv.cuh WSM; the same bits
// as the register slots), so that under the mixer they are launched ahead of (PDL_AHEAD_MIXER) the whole
// weight, not the first four chunks a warp, streams while HBM would idle. With the x sums of qmv_xsumq only.
// Off: measured on the H100 (session 42, bench/results/qmv_deep_h100.json) o_proj alone 7.56 -> 8.92 us and
// the 27B INT4 decode 0.3% slower; the overlap under the mixer wins back only part of the ring's cost.
constexpr int kQmvDeep = 12;
bool qmv_deep(const qmm::Args& a) {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_QMV_DEEP");
        return e && e[0] == '1';
    }();
    return on && qmv_xsumq() && a.M == 1 && a.KC <= kQmvDeep * qmm::kQmvWarps &&
           qmm::qmv_ring_offset(a, 1, true, true, true) + qmm::qmv_ring_bytes(kQmvDeep, 1, false) <=
               qmm::kQmvMaxSmem;
}
template <bool ASYM, int SSZ>
void launch_qmv_row_deep(qmm::Args& a, cudaStream_t s) {
    constexpr int kSum = qmm::kQmvMmaSum | qmm::kQmvXsumQuad;
    launch_qmv_m<false, ASYM, SSZ, 1, kQmvDeep, 3, false, 8, kSum, true>(a, s);
}
// 2..8 rows (x read through L1): FP8 as it was, INT4 with the sums above.
template <bool FP8, bool ASYM, int SSZ, int NTB, int D, int MINB>
void launch_qmv_rows8(qmm::Args& a, cudaStream_t s) {
    if constexpr (!FP8) {
        if (qmv_xsumq())
            return launch_qmv_m<false, ASYM, SSZ, NTB, D, MINB, true, 8, qmm::kQmvXsumQuad>(a, s);
    }
    launch_qmv_m<FP8, ASYM, SSZ, NTB, D, MINB, true>(a, s);
}

// One block per NTB n-tiles over all of K: NTB = 2 when the weight has at least 4 n-tiles per SM, else 1, but
// INT4 one row two tiles at depth 2 (the fixed-group loop of quant_qmv.cuh needs an even depth; session 9:
// gate_up 27.4 us, 28.8 at depth 3; lm_head 166 / 170), and
// FP8 one row always 1 (session 9: gate_up 48.4 / 49.8 us, lm_head 297.5 / 302.3 with one / two; the
// two-tile FP8 one-row kernel also spills at 64 registers). Session 8, INT4 one row: two-tile blocks took
// q_gate (768 n-tiles) 13.3 -> 12.2 us while down and o_proj (320) were 17-20% slower with them. Session 9,
// staged scales and fragment-ordered x, the same split at one, four and eight rows (four rows: gate_up 34.7
// -> 31.1 us with two tiles, down 25.5 -> 17.2 with one); FP8 at four and eight rows the same (eight rows:
// q_gate 23.2 -> 19.1 us with two tiles, down 38.8 -> 35.1 with one), at sixteen one tile on every shape
// (two: 1-27% slower).
//
// Session 10 (quant_qmv.cuh's warp-local scale staging, same call): it took one row's down 18.8 -> 17.0 us,
// q_gate 12.5 -> 10.8, gdn_qkv 10.9 -> 10.1, o_proj 8.8 -> 7.8, but gate_up 28.3 -> 29.0 and lm_head 164.6 ->
// 175.1, so one-row weights of at least 8 n-tiles per SM keep the block-wide staging; at 4 and 16 rows it
// was faster on every shape. At 9..16 rows the 320-n-tile weights took the two-tile blocks at two per SM too
// (o_proj 10.4 -> 9.5 us against one-tile blocks at depth 4, down 24.0 / 24.3); since session 35 they take
// one-tile blocks at depth 2 (qmv_m16_one).
// Session 17's one-row blocks for weights of 4 to 8 n-tiles per SM (launch_qmv_ssz); GRIMOIRE_QMV_MID=0 keeps
// the 2..16-row form there (the A/B).
bool qmv_mid() {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_QMV_MID");
        return !(e && e[0] == '0');
    }();
    return on;
}

// INT4 at 9..16 rows on weights of at least 8 n-tiles per SM (gate_up, lm_head): the two-tile blocks with the
// accumulators in shared memory (quant_qmv.cuh kQmvAccSmem; 80 registers) at three per SM instead of two,
// when the scale table leaves room for them. Measured on an H100 (docs/BENCHMARKS.md, session 34; sixteen
// rows, us, twice, against the two-per-SM form): gate_up 41.72, 41.94 / 42.76, 42.82; lm_head 273.8, 274.4 /
// 283.8, 282.9; the same bits. Slower on the narrower weights (q_gate +4%, down +21%), which keep their
// forms. GRIMOIRE_QMV_ACS=0 keeps the two-per-SM form (the A/B). FP8 at 9..16 rows takes the same blocks (two
// tiles, three per SM) on weights of at least 4 n-tiles per SM, where it had one-tile blocks only (its
// two-tile form spilled at 80 registers). Same H100 call, us, one-tile library / two tiles with the
// accumulators in shared memory, twice: gate_up 73.26, 73.02 / 67.83, 67.83; q_gate 25.80, 25.81
// / 24.35, 24.30; DeltaNet qkv 27.23, 27.13 / 24.01, 23.94; lm_head 464.5, 464.5 / 444.6, 444.4; down and
// o_proj (4 n-tiles per SM or fewer) 17-20% slower, so they keep one tile.
bool qmv_acs(const qmm::Args& a, bool fp8, bool asym) {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_QMV_ACS");
        return !(e && e[0] == '0');
    }();
    return on && qmv_launch_smem(a, fp8, asym) <= qmm::qmv_max_dyn_smem(qmm::kQmvAccSmem);
}

// INT4 at 9..16 rows on weights of fewer than 4 n-tiles per SM (down, o_proj: 320): one-tile blocks at depth
// 2, three per SM, twice the blocks of the two-tile form at two per SM. bench_qmv_variants, sixteen rows, us,
// `ssm_ntb1_d2` / the two-tile library form: H100 (session 34's two passes) o_proj 9.60, 9.79 / 10.21, 10.34,
// down 23.88, 24.10 / 24.14, 24.17; H200 (sessions 19-20, three calls) down 24.35, 24.82, 24.13
// / 24.65, 25.00, 24.53, o_proj 9.93, 10.03, 9.83 / 9.87, 9.95, 10.01. The same bits (the block's sums are
// per n-tile). Not for glu parts, whose blocks pair two tiles. GRIMOIRE_QMV_M16_ONE=0 keeps the two-tile form
// (the A/B).
bool qmv_m16_one() {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_QMV_M16_ONE");
        return !(e && e[0] == '0');
    }();
    return on;
}

// INT4 at 9..16 rows (launch_qmv_ssz's forms, and the glu parts' with one_ok false): see there, qmv_acs and
// qmv_m16_one; XQ: kQmvXsumQuad or 0.
template <bool ASYM, int SSZ, int XQ>
void launch_qmv_int4_m16_x(qmm::Args& a, bool two, bool wide, bool one_ok, cudaStream_t s) {
    if (two && !wide) return launch_qmv_m<false, ASYM, SSZ, 2, 2, 3, true, 16, XQ>(a, s);
    if (wide && qmv_acs(a, false, ASYM))
        return launch_qmv_m<false, ASYM, SSZ, 2, 3, 3, true, 16, qmm::kQmvAccSmem | XQ>(a, s);
    if (!two && one_ok && qmv_m16_one()) return launch_qmv_m<false, ASYM, SSZ, 1, 2, 3, true, 16, XQ>(a, s);
    launch_qmv_m<false, ASYM, SSZ, 2, 3, 2, true, 16, XQ>(a, s);
}
template <bool ASYM, int SSZ>
void launch_qmv_int4_m16(qmm::Args& a, bool two, bool wide, bool one_ok, cudaStream_t s) {
    qmv_xsumq() ? launch_qmv_int4_m16_x<ASYM, SSZ, qmm::kQmvXsumQuad>(a, two, wide, one_ok, s)
                : launch_qmv_int4_m16_x<ASYM, SSZ, 0>(a, two, wide, one_ok, s);
}

template <bool FP8, bool ASYM, int SSZ>
void launch_qmv_ssz(qmm::Args& a, cudaStream_t s) {
    const bool two = a.NT >= 4 * qmm::device_sms(), wide = a.NT >= 8 * qmm::device_sms();
    // Session 12 (x staged by cp.async, overlapped with the table): INT4 one row on weights of at least 8
    // n-tiles per SM takes the staged two-tile blocks at four per SM (64 registers, warp-local staging; same
    // call, us: gate_up 27.55 against 28.9 at three per SM, lm_head 163.4 against 175.8; the 2..16-row form read
    // 28.0 / 178.4 in session 10). GRIMOIRE_QMV_WIDE4=0 keeps the 2..16-row form there (the A/B).
    static const bool wide4 = [] {
        const char* e = std::getenv("GRIMOIRE_QMV_WIDE4");
        return !(e && e[0] == '0');
    }();
    // Session 17's rule for 4 to 8 n-tiles per SM (qmv_mid): where three two-tile blocks per SM would leave a
    // partial second wave (more than 3 x SMs blocks), other blocks. `row`: one row with whole-chunk x.
    const bool mid = qmv_mid() && two, waves2 = (a.NT + 1) / 2 > 3 * qmm::device_sms();
    const bool row = a.M == 1 && a.ldx % 64 == 0;
    if constexpr (!FP8) {
        if (wide4 && wide && row) return launch_qmv_row<ASYM, SSZ, 2, 2, 4>(a, s);
        // One row from 4 to 8 n-tiles per SM (the 27B attention q | gate | k | v of 896 n-tiles, the DeltaNet
        // q | k | v | z of 1024, q_gate of 768) on the staged two-tile blocks too, at four per SM where three
        // would leave a second, partial wave, else at three. Session 17, H200, same call against the 2..16-row
        // form below (us): q | gate | k | v 14.38 -> 11.83, q | k | v | z 15.58 -> 12.34, q_gate 9.90 -> 9.92;
        // 27B INT4 step without logits 4.77 -> 4.50 ms.
        if (mid && row)
            return waves2 ? launch_qmv_row<ASYM, SSZ, 2, 2, 4>(a, s) : launch_qmv_row<ASYM, SSZ, 2, 2, 3>(a, s);
    }
    // FP8 one row also takes the staged one-tile blocks where the two-tile 2..16-row blocks (three per SM;
    // FP8 has no four-per-SM form that does not spill) would leave a partial second wave. Session 17, same
    // call (us): q | gate | k | v 26.13 -> 22.34, q | k | v | z 27.70 -> 24.01; q_gate (384 two-tile blocks,
    // one wave) keeps the two-tile form (17.45 against 20.10), gate_up too (47.46 / 47.98). The staged-x
    // blocks: one row where qmv_staged_x says so, and FP8 one row where three two-tile blocks per SM would
    // leave a partial second wave (below).
    const bool staged = qmv_staged_x(a) || (FP8 && mid && !wide && row && waves2);
    if constexpr (FP8) {
        // GRIMOIRE_QMV_F8H (session 44, the A/B; off by default): FP8 one row with the mma in FP16
        // (quant_qmv.cuh kQmvF16), 1: on the staged one-tile blocks where the library stages x; 2: every
        // one-row weight on them; 3: every one-row weight on staged two-tile blocks at four per SM (one tile
        // where fewer than 4 n-tiles per SM). Off: on an H100 (docs/BENCHMARKS.md session 44) the staged
        // kernels ran faster alone (down 43.3 -> 37.0 us) but not between small ops (31.2 / 31.5 us), and the
        // 27B FP8 decode read 0.846-0.851 of roofline with 1 or 3 against 0.860 off: the conversion pass
        // lengthens the path after the programmatic-launch wait.
        static const int f8h = [] {
            const char* e = std::getenv("GRIMOIRE_QMV_F8H");
            return e ? std::atoi(e) : 0;
        }();
        if (f8h > 0 && a.M == 1 && (f8h >= 2 || staged)) {
            if (f8h == 3 && two) return launch_qmv_m<FP8, ASYM, SSZ, 2, 2, 4, false, 8, qmm::kQmvF16>(a, s);
            return launch_qmv_m<FP8, ASYM, SSZ, 1, 4, 3, false, 8, qmm::kQmvF16>(a, s);
        }
    }
    if (staged) {
        if constexpr (!FP8) {
            if (wide) return launch_qmv_row<ASYM, SSZ, 2, 2, 3, qmm::kQmvBlockStage>(a, s);
            if (two) return launch_qmv_row<ASYM, SSZ, 2, 2, 3>(a, s);
            if (qmv_deep(a)) return launch_qmv_row_deep<ASYM, SSZ>(a, s);
            return launch_qmv_row<ASYM, SSZ, 1, 4, 3>(a, s);
        }
        // FP8 one row on these blocks keeps the early dependents' launch too. Back-to-back launches of one
        // weight read it 11-20% slower (session 17: down 26.8 -> 32.4 us, o_proj 11.7 -> 13.1), but in the
        // decode step, where the dependent is a norm or another small op and then the next projection, it is
        // faster: 27B FP8 `decode_ctx512_roofline` 0.752 (x4) -> 0.756-0.757 (x4) alternated in one call
        // (session 25). The back-to-back cost was the blocks' placement, which qmv_cap_smem now bounds
        // (session 46). GRIMOIRE_QMV_EARLY_FP8_ROW=0 launches them at the blocks' end (the A/B).
        static const bool fp8_row_early = [] {
            const char* e = std::getenv("GRIMOIRE_QMV_EARLY_FP8_ROW");
            return !(e && e[0] == '0');
        }();
        if (!fp8_row_early) a.early = 0;
        return launch_qmv_m<FP8, ASYM, SSZ, 1, 4, 3, false>(a, s);
    }
    if (a.M > 8) {
        // INT4, two tiles with two B operands: two chunks in flight at two blocks per SM (no spills, and the
        // fixed-group loop, which needs an even depth), but from 4 to 8 n-tiles per SM one chunk at three
        // blocks (session 9, sixteen rows, same call: gate_up 36.2 / 40.1 us, lm_head 238 / 257; q_gate 15.6
        // / 14.1, gdn_qkv 14.2 / 14.0).
        if constexpr (!FP8) {
            return launch_qmv_int4_m16<ASYM, SSZ>(a, two, wide, true, s);
        } else {
            // Also tried (session 25, us at 16 rows, this form / one tile at depth 2 four per SM / two tiles at depth
            // 2 two per SM): gate_up 61.2 / 63.3 / 71.6, down 34.9 / 47.4 / 49.3, o_proj 13.4 / 18.0 / 18.7.
            if (two && qmv_acs(a, FP8, ASYM))
                return launch_qmv_m<FP8, ASYM, SSZ, 2, 2, 3, true, 16, qmm::kQmvAccSmem>(a, s);
            return launch_qmv_m<FP8, ASYM, SSZ, 1, 4, 3, true, 16>(a, s);
        }
    }
    if constexpr (!FP8) {
        // INT4 2..8 rows where three two-tile blocks per SM would leave a partial second wave (the DeltaNet
        // q | k | v | z of 1024 n-tiles, the attention q | gate | k | v of 896): four per SM at one chunk in flight.
        // Session 17, same call (us, four / eight rows): q | k | v | z 16.10 -> 14.65 / 16.37 -> 14.58,
        // q | gate | k | v 14.42 -> 14.29 / 14.63 -> 14.45; q_gate (384 blocks) and gate_up keep three per SM.
        if (mid && !wide && waves2) return launch_qmv_rows8<FP8, ASYM, SSZ, 2, 2, 4>(a, s);
    }
    two ? launch_qmv_rows8<FP8, ASYM, SSZ, 2, 3, 3>(a, s) : launch_qmv_rows8<FP8, ASYM, SSZ, 1, 4, 3>(a, s);
}

// Whether one launch takes the qmv kernel. Measured on the H200 against the M = 1..16 kernels at
// the six 27B shapes (docs/BENCHMARKS.md, session 7): one row is faster on every shape and format but the
// INT4 lm_head (about equal); 2..4 rows (x read through L1) are faster for INT4 up to gate_up's width and for
// FP8 on the 5120-channel projections narrower than gate_up, slower on the lm_head-sized INT4 weights and on
// FP8 gate_up, down and lm_head, where the cp.async / Hopper kernels keep them. INT4 at 2..8 rows (session 9,
// staged scales, fragment-ordered x): faster than the M <= 16 kernel on every shape, the lm_head included
// (eight rows: gate_up 34.4 -> 31.1 us, down 28.0 -> 17.7, q_gate 14.1 -> 11.1, lm_head 215 -> 196); FP8 too
// with fragment-ordered x, against the Hopper kernel (sixteen rows: gate_up 90.9 -> 66.8, down 56.5 -> 39.6,
// q_gate 46.6 -> 24.4, lm_head 502 -> 424; four rows: gate_up 58.1 -> 48.1, lm_head 340 -> 305). So every
// M <= 16 with whole-chunk scale groups.
bool qmv_takes(const qmm::Args& a) { return a.M <= qmm::kQmvMaxM; }

// Whether this launch takes the qmv kernel (whole-chunk scale groups; forced grids are the tests of the
// other kernels' split reduction).
bool qmv_route(const qmm::Args& a, bool fp8, bool asym, int forced_blocks) {
    return forced_blocks <= 0 && a.gpc == 1 && use_qmv(fp8) && qmv_takes(a) &&
           qmv_launch_smem(a, fp8, asym) <= qmm::kQmvMaxSmem;
}

// glu parts (QmmParts::glu): the two-tile instances of launch_qmv_ssz's choices, each block pairing gate
// n-tile t with up n-tile t + NT / 2; where launch_qmv_ssz takes one-tile blocks (narrow weights, FP8 one
// row) the nearest two-tile form. Not offered for FP8 above 8 rows (until session 34 its only 9..16-row form
// had one-tile blocks; its two-tile form for 4+ n-tiles per SM has not been measured as glu parts).
template <bool FP8, bool ASYM, int SSZ>
void launch_qmv_glu(qmm::Args& a, cudaStream_t s) {
    const bool two = a.NT >= 4 * qmm::device_sms(), wide = a.NT >= 8 * qmm::device_sms();
    if constexpr (!FP8) {
        if (a.M == 1 && wide && a.ldx % 64 == 0) return launch_qmv_row<ASYM, SSZ, 2, 2, 4>(a, s);
        if (qmv_staged_x(a)) {
            if (wide) return launch_qmv_row<ASYM, SSZ, 2, 2, 3, qmm::kQmvBlockStage>(a, s);
            return launch_qmv_row<ASYM, SSZ, 2, 2, 3>(a, s);
        }
        if (a.M > 8) return launch_qmv_int4_m16<ASYM, SSZ>(a, two, wide, false, s);
    } else {
        if (a.M > 8 || a.ldx % 64 != 0) throw Error("cuda qmm_fp8: glu parts for more than 8 rows or unaligned x");
    }
    launch_qmv_rows8<FP8, ASYM, SSZ, 2, 3, 3>(a, s);
}

// The scale width is a template parameter (the kernel's scale loads); FP8 scales are always f32.
template <bool FP8, bool ASYM>
void launch_qmv(qmm::Args& a, cudaStream_t s) {
    if (a.parts.glu) {
        if constexpr (FP8)
            launch_qmv_glu<FP8, ASYM, 4>(a, s);
        else
            a.ssz == 4 ? launch_qmv_glu<FP8, ASYM, 4>(a, s) : launch_qmv_glu<FP8, ASYM, 2>(a, s);
        return;
    }
    if constexpr (FP8)
        launch_qmv_ssz<FP8, ASYM, 4>(a, s);
    else
        a.ssz == 4 ? launch_qmv_ssz<FP8, ASYM, 4>(a, s) : launch_qmv_ssz<FP8, ASYM, 2>(a, s);
}

template <bool FP8, int MT, bool ASYM, int GK>
void launch(qmm::Args& a, const QmmWorkspace& ws, int forced_blocks, cudaStream_t s) {
    if constexpr (GK == 0) {
        if (qmv_route(a, FP8, ASYM, forced_blocks)) return launch_qmv<FP8, ASYM>(a, s);
    }
    if (a.ntm) throw Error("cuda qmm: an n-tile-major weight takes the one-pass kernel only (qmv_route)");
    if (a.parts.glu) throw Error("cuda qmm: glu parts need the one-pass kernel (see qmm_glu_ok)");
    // The kernel body exists only in sm_90 code: a binary built without it keeps the cp.async kernel.
    static const bool tma_built = [] {
        cudaFuncAttributes fa{};
        return cudaFuncGetAttributes(&fa, qmm::qmm_tma_kernel<FP8, MT, ASYM, GK>) == cudaSuccess &&
               fa.binaryVersion >= 90;
    }();
    if (tma_built && use_tma(FP8)) return launch_tma<FP8, MT, ASYM, GK>(a, forced_blocks, s);
    auto kernel = qmm::qmm_kernel<FP8, MT, ASYM, GK>;
    const size_t smem = qmm::plan_stage(a, FP8, ASYM);
    static const bool attr_set = [&] {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
        return true;
    }();
    (void)attr_set;
    // Blocks resident per SM for this shared-memory size (it depends on M and the scale groups per chunk).
    static size_t occ_smem[kQmmMaxM + 1] = {};
    static int occ_n[kQmmMaxM + 1] = {};
    if (occ_smem[a.M] != smem) {
        int n = 0;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, qmm::kThreads, smem);
        occ_n[a.M] = n < 1 ? 1 : (n > kMaxBlocksPerSm ? kMaxBlocksPerSm : n);
        occ_smem[a.M] = smem;
    }
    // One wave of resident blocks, but each with enough chunks to spread its fixed costs (ring fill, partial
    // write and arrival); more rows make partials heavier, so fewer, longer ranges, up to 16 chunks: at M = 16,
    // 16 instead of 24 took q_gate 36 -> 32 us and the DeltaNet qkv 41-43 -> 30 us (down 46 -> 49; the other
    // shapes equal; H200, docs/BENCHMARKS.md session 6), and at M <= 8 fewer chunks per block measured best.
    static const int env_steps = [] {
        const char* e = std::getenv("GRIMOIRE_QMM_MIN_STEPS");
        return e && std::atoi(e) > 0 ? std::atoi(e) : 0;
    }();
    const int min_steps = env_steps > 0 ? env_steps : std::min(8 + a.M, 16);
    int blocks = forced_blocks > 0 ? forced_blocks : occ_n[a.M] * qmm::device_sms();
    if (forced_blocks <= 0 && blocks > a.W / min_steps) blocks = a.W / min_steps;
    if (blocks < 1) blocks = 1;
    if (blocks > a.W) blocks = a.W;
    if (static_cast<size_t>(blocks) * 2 * a.M * qmm::kColBlock * 4 > partials_region())
        throw Error("cuda qmm: more grid blocks than the partials workspace holds");
#if GRIMOIRE_QMM_PDL
    // Programmatic dependent launch on Hopper (GRIMOIRE_QMM_PDL=0 in the environment turns it off): the weight
    // prefetch and the launch itself overlap the previous kernel's tail.
    static const bool pdl = [] {
        const char* e = std::getenv("GRIMOIRE_QMM_PDL");
        return device_is_hopper() && !(e && std::atoi(e) == 0);
    }();
    launch_ex(kernel, a, blocks, qmm::kThreads, smem, pdl, s);
#else
    kernel<<<static_cast<unsigned>(blocks), qmm::kThreads, smem, s>>>(a);
#endif
}

template <bool FP8, bool ASYM>
void launch_gk(qmm::Args& a, const QmmWorkspace& ws, int forced, cudaStream_t s) {
    const int gk = a.gpc == 1 ? 0 : a.gpc == 2 ? 2 : 1;
    const bool two = a.M > 8;
    if (gk == 0) two ? launch<FP8, 2, ASYM, 0>(a, ws, forced, s) : launch<FP8, 1, ASYM, 0>(a, ws, forced, s);
    else if (gk == 2) two ? launch<FP8, 2, ASYM, 2>(a, ws, forced, s) : launch<FP8, 1, ASYM, 2>(a, ws, forced, s);
    else two ? launch<FP8, 2, ASYM, 1>(a, ws, forced, s) : launch<FP8, 1, ASYM, 1>(a, ws, forced, s);
}

}  // namespace

// Shared by qmm_int4 / qmm_fp8: validates x / y, the group size and the workspace, fills the common arguments
// (x converted / gathered into the workspace when it is not BF16 in channel order with 16-byte rows).
bool qmm_prepare(const char* op,
                 int64_t N,
                 int64_t K,
                 int64_t NT,
                 int64_t KC,
                 int64_t G,
                 int64_t gs,
                 const int32_t* perm,
                 bool fp8,
                 bool asym,
                 int forced,
                 const Tensor& x,
                 Tensor& y,
                 const QmmWorkspace& ws,
                 cudaStream_t s,
                 const QmmParts* parts,
                 qmm::Args& a) {
    const int64_t M = x.rows();
    const bool permuted = chunk_permuted(gs, G);  // quant/tile_layout.h
    if (x.cols() != K || y.rows() != M || y.cols() != N)
        throw Error(std::string("cuda ") + op + ": x [M, K], y [M, N] disagree with the weight [" + std::to_string(N) +
                    ", " + std::to_string(K) + "]");
    if (M > kQmmMaxM) throw Error(std::string("cuda ") + op + ": M = " + std::to_string(M) + " > 16");
    if (!qmm_supported(gs, G))
        throw Error(std::string("cuda ") + op + ": scale groups of " + std::to_string(gs) +
                    " channels (the kernel takes 16, 32 or multiples of 64; the dequant path takes the rest)");
    if (M == 0 || N == 0) return false;
    const int64_t nb = (NT + qmm::kNtPerBlock - 1) / qmm::kNtPerBlock;
    if (nb * KC > (1ll << 30) || N > (1 << 30) || K > (1 << 30))
        throw Error(std::string("cuda ") + op + ": weight too large for 32-bit work indices");
    size_t need = 0;
    int counters = 0;
    qmm_workspace_need(N, K, &need, &counters);
    if (!ws.partials || !ws.counters || ws.n_counters < counters || ws.partial_bytes < need)
        throw Error(std::string("cuda ") + op + ": workspace too small (reserve qmm_workspace_need)");
    a.partials = ws.partials, a.counters = ws.counters;
    a.y = y.data, a.ydt = dt_code(y.dtype, op, "y");
    a.N = static_cast<int>(N), a.K = static_cast<int>(K), a.NT = static_cast<int>(NT), a.KC = static_cast<int>(KC);
    a.M = static_cast<int>(M);
    a.G = static_cast<int>(G < 1 ? 1 : G);
    a.gs = static_cast<int>(G <= 1 ? K : gs);
    a.gpc = G <= 1 || gs >= 64 ? 1 : static_cast<int>(64 / gs);
    a.W = static_cast<int>(nb * KC);
    // GRIMOIRE_QMM_EARLY=1 (a benchmark variant): let the next grid launch at this one's start instead of
    // after each block's last chunk. Same-binary 27B decode on the H200 (docs/BENCHMARKS.md, session 6): no
    // gain.
    static const int early = [] {
        const char* e = std::getenv("GRIMOIRE_QMM_EARLY");
        return e && e[0] == '1' ? 1 : 0;
    }();
    a.early = early;
    if (parts && parts->glu && (parts->n != 1 || N % 32 != 0 || !qmm_glu_ok(fp8, asym, M, N, K, gs, G)))
        throw Error(std::string("cuda ") + op + ": glu parts need one part, N a multiple of 32 and qmm_glu_ok");
    if (parts && parts->n > 0) {
        if (parts->n > kQmmMaxParts || parts->col[0] != 0 || parts->col[parts->n] != N)
            throw Error(std::string("cuda ") + op + ": the parts do not cover the output's " +
                        std::to_string(N) + " columns");
        for (int i = 0; i < parts->n; ++i)
            if (parts->col[i + 1] <= parts->col[i] || !parts->data[i])
                throw Error(std::string("cuda ") + op + ": part " + std::to_string(i) + " is empty");
        if (parts->conv && (parts->glu || !parts->conv_w || !parts->conv_state || parts->conv_k != kQmmConvK))
            throw Error(std::string("cuda ") + op + ": conv parts need a conv weight and state, 4 taps, no glu");
        a.parts = *parts;
    }
#ifdef GRIMOIRE_QMM_TRACE
    static int launches = 0;
    a.tslot = launches++ & 1;
#endif
    // x as it is when the kernel can read it so: BF16 in channel order with 16-byte rows, and for the qmv
    // kernel at 2..16 rows whole chunks (it reads each chunk's 64 channels unguarded); the stream-K kernels
    // read a chunk-permuted weight's x by k-slot. Else converted / gathered into the workspace, zeros past K.
    const int xdt = dt_code(x.dtype, op, "x");
    uint16_t* xb = reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(ws.partials) + partials_region());
    const bool qmv = qmv_route(a, fp8, asym, forced);
    if (a.parts.conv && M > 1 && !qmv)
        throw Error(std::string("cuda ") + op + ": conv parts for several rows need the one-pass kernel (qmm_conv_ok)");
    const bool direct = xdt == kBF16 && perm == nullptr && (reinterpret_cast<uintptr_t>(x.data) & 15) == 0 &&
                        (qmv ? K % (a.M == 1 ? 8 : 64) == 0 : !permuted && K % 8 == 0);
    if (direct) {
        a.x = static_cast<const uint16_t*>(x.data), a.ldx = static_cast<int>(K);
    } else {
        a.ldx = static_cast<int>(KC * 64);
        const int64_t n = M * a.ldx;
        prep_x_kernel<<<static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 1024)), 256, 0, s>>>(
            x.data, xdt, perm, permuted && !qmv, a.M, a.K, a.ldx, xb);
        check_launch(op);
        a.x = xb;
    }
    // The qmv kernel (quant_qmv.cuh): its dependents launch once every block has passed the
    // programmatic-launch wait instead of at each block's end, so the next kernel's blocks fill the SMs this
    // grid's last partial wave leaves idle and start their own pre-wait loads there (GRIMOIRE_QMV_EARLY=0: at
    // the end, the A/B). H200, docs/BENCHMARKS.md session 17, back-to-back launches: INT4 one row 2-8% faster
    // (gate_up 27.25 -> 26.79 us, o_proj 7.39 -> 6.78), FP8 at 4 and 16 rows and on its wider weights too (FP8
    // one row on the staged one-tile blocks: in the decode step, launch_qmv_ssz). With Backend::linear_follows
    // it lets the next projection launch ahead.
    static const int qmv_early = [] {
        const char* e = std::getenv("GRIMOIRE_QMV_EARLY");
        return e && e[0] == '0' ? 0 : 1;
    }();
    if (qmv) a.early = qmv_early;
    return true;
}

namespace {
// The launch arguments of M rows of an [N, K] weight with these scale groups that the routing depends on (no
// pointers), as qmm_prepare fills them: what the queries below decide from.
qmm::Args shape_args(bool fp8, int64_t M, int64_t N, int64_t K, int64_t group_size, int64_t G) {
    qmm::Args a{};
    a.M = static_cast<int>(M), a.N = static_cast<int>(N), a.K = static_cast<int>(K);
    a.NT = static_cast<int>((N + 15) / 16), a.KC = static_cast<int>((K + 63) / 64);
    a.G = static_cast<int>(G < 1 ? 1 : G);
    a.gs = static_cast<int>(G <= 1 ? K : group_size);
    a.gpc = G <= 1 || group_size >= 64 ? 1 : static_cast<int>(64 / group_size);
    a.ssz = fp8 ? 4 : 2;
    a.bn = fp8 ? 1 : 0;  // any block height: the kernels take every row's own scale
    return a;
}
}  // namespace

int qmm_dtype_code(DType t) {
    return t == DType::F32 ? kF32 : t == DType::BF16 ? kBF16 : t == DType::F16 ? kF16 : -1;
}

bool qmm_conv_ok(bool fp8, bool asym, int64_t M, int64_t N, int64_t K, int64_t group_size, int64_t G) {
    if (M < 1 || M > kQmmMaxM || N <= 0 || !qmm_supported(group_size, G)) return false;
    if (M == 1) return true;  // every kernel stores one row's columns through store_y
    return qmv_route(shape_args(fp8, M, N, K, group_size, G), fp8, asym, 0);
}

bool qmm_glu_ok(bool fp8, bool asym, int64_t M, int64_t N, int64_t K, int64_t group_size, int64_t G) {
    if (M < 1 || M > kQmmMaxM || N % 32 != 0 || N <= 0 || !qmm_supported(group_size, G)) return false;
    // FP8 one row: its one-tile blocks beat the two-tile form by more than the silu_mul launch (27B step 8.16 vs
    // 8.40 ms, docs/BENCHMARKS.md session 15), so it keeps the two parts.
    if (fp8 && (M > 8 || M == 1)) return false;
    return qmv_route(shape_args(fp8, M, N, K, group_size, G), fp8, asym, 0);
}

void qmm_int4(const Int4Dev& w,
              const Tensor& x,
              Tensor& y,
              const QmmWorkspace& ws,
              cudaStream_t s,
              int forced,
              const QmmParts* parts) {
    qmm::Args a{};
    if (!qmm_prepare("qmm_int4", w.N, w.K, w.NT, w.KC, w.G, w.group_size, w.perm, false, w.zeros != nullptr,
                     forced, x, y, ws, s, parts, a))
        return;
    a.words = w.words, a.scales = w.scales, a.zeros = w.zeros;
    a.NP = static_cast<int>(w.NT * 16);
    a.sdt = dt_code(w.scale_dtype, "qmm_int4", "scales");
    a.ssz = w.scale_dtype == DType::F32 ? 4 : 2;
    w.zeros != nullptr ? launch_gk<false, true>(a, ws, forced, s) : launch_gk<false, false>(a, ws, forced, s);
    check_launch("qmm_int4");
}

void qmm_fp8(const Fp8Dev& w,
             const Tensor& x,
             Tensor& y,
             const QmmWorkspace& ws,
             cudaStream_t s,
             int forced,
             const QmmParts* parts) {
    qmm::Args a{};
    if (!qmm_prepare("qmm_fp8", w.N, w.K, w.NT, w.KC, w.SG, w.bk, nullptr, true, false, forced, x, y, ws, s,
                     parts, a))
        return;
    a.words = w.words, a.scales = w.scales, a.zeros = nullptr;
    a.bn = static_cast<int>(w.bn), a.SG = static_cast<int>(w.SG);
    a.sdt = kF32, a.ssz = 4;
    a.ntm = w.tile_order;
    launch_gk<true, false>(a, ws, forced, s);
    check_launch("qmm_fp8");
}

#ifdef GRIMOIRE_QMM_TRACE
// Diagnostic builds: the per-block timelines of the last two launches, [2][kTraceBlocks][kTracePoints].
void qmm_trace_read(unsigned long long* out) {
    cudaMemcpyFromSymbol(out, qmm::g_trace, sizeof(qmm::g_trace));
}
#endif

}  // namespace grimoire::cuda
