// CudaBackend: the Backend seam on one NVIDIA GPU. Activations are BF16 (norm statistics, softmax and the
// DeltaNet state in fp32); weights are kept in the dtype upload() is asked for (BF16 for the model GEMMs).
//
// Decisions beyond the interface (see backend.h):
//  * Every op is recorded by StepGraph and runs at the next host sync point (to_host, synchronize,
//    free_persistent, reset_scratch); a step seen twice is captured as a CUDA graph and replayed from then on.
//    Values that change per step (uploaded token ids / positions, attention's n_past) reach the kernels
//    through device memory filled from pinned staging, so the graph stays valid at every length.
//    GRIMOIRE_CUDA_GRAPHS=0 (or set_graphs(false)) launches every op immediately instead.
//  * matmul: x of up to 8 rows (decode) uses the bandwidth-bound gemv kernel; larger x uses cuBLAS
//    (cublasGemmEx, fp32 accumulation). x/out may be BF16 or F32; weights BF16, F16 or F32.
//  * Shape relaxations match the CPU oracle: attention q/out [T, Hq, D] or [T, Hq*D] (Hkv, D from the cache),
//    conv1d_silu w [C, K] or [C, 1, K].
//  * --random-weights: set_random_weights(seed) makes upload() fill each tensor on the device with
//    deterministic pseudo-random values of a sensible scale instead of reading the file (the loader runs
//    unchanged over a header-only checkpoint), so a 27B-shaped model needs no 54 GB download.
//  * Large uploads print a progress line (bytes, rate) on stderr.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/step_graph.h"
#include "kernels/cuda/l2_prefetch.h"

namespace grimoire {

namespace cuda {
struct ZeroRanges;
}

class CudaBackend final : public Backend {
public:
    // act = BF16 (production) or F32 (a reference mode: GEMMs then run in fp32, for tight comparisons with
    // the CPU oracle; GRIMOIRE_CUDA_ACT=f32 selects it through make_cuda_backend).
    explicit CudaBackend(int device = 0, DType act = DType::BF16);
    ~CudaBackend() override;

    Device device() const override { return Device::CUDA; }
    std::string name() const override { return name_; }
    DType act_dtype() const override { return act_; }
    MemoryStats memory() const override;

    Tensor upload(const TensorInfo& t, DType as) override;
    Tensor upload_raw(const void* host, DType dtype, std::initializer_list<int64_t> shape) override;
    Tensor alloc_persistent(DType dtype, std::initializer_list<int64_t> shape) override;
    void free_persistent(Tensor& t) override;
    Tensor scratch(DType dtype, std::initializer_list<int64_t> shape) override;
    void reset_scratch() override;
    void to_host(const Tensor& t, void* host) const override;
    void* host_staging(size_t bytes) override;
    // The copy and an event after it are recorded (external event nodes in a captured step); wait_host flushes
    // the step and waits on that event. `host` must be page-locked (host_staging) for the copy to be
    // asynchronous and capturable.
    int to_host_async(const Tensor& t, void* host) override;
    void wait_host(int ticket) override;
    void from_host(Tensor& t, const void* host) override;
    void zero(Tensor& t) override;
    void copy(const Tensor& src, Tensor& dst) override;
    void synchronize() override;

    void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override;
    void rmsnorm(const Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& out) override;
    void rmsnorm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out) override;
    void add(const Tensor& a, const Tensor& b, Tensor& out) override;
    void scale(Tensor& x, float s) override;
    void mul_sigmoid(Tensor& x, const Tensor& gate) override;
    void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
    void copy_cols(const Tensor& src, int64_t c0, Tensor& out) override;
    void rope(Tensor& x, const Tensor& positions, const RopeParams& p) override;
    void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                   int64_t n_past, float scale, Tensor& out) override;
    void conv1d_silu(const Tensor& x, const Tensor& w, Tensor& state, Tensor& out) override;
    void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                          const Tensor& A_log, const Tensor& dt_bias, Tensor& state, Tensor& out) override;
    void matmul(const Tensor& x, const Tensor& w, Tensor& out) override;
    // Prompts: where a wave model says so, one GEMM over the whole stacked weight into scratch, then one
    // split_cols launch (a GEMM per part ran narrow parts such as DeltaNet's b / a, N = 48, or k / v,
    // N = 1024, at a fraction of the tensor cores). On by default; GRIMOIRE_DENSE_STACK=0 or
    // set_stack_split(false) turns it off: every part then runs its own GEMM (the earlier path).
    void matmul_split(const Tensor& x, const Tensor& w, Tensor* ys, size_t n_ys) override;
    void set_stack_split(bool on) { stack_split_ = on; }
    // A prompt's recorded ops are flushed (run, or captured / replayed as their own graph) at the first GEMM
    // after `n` of them, so the GPU starts on the first segment while the host records the rest instead of
    // idling through the whole step's recording. 0 records the step as one piece (decode steps have no cuBLAS
    // GEMM, so only set_first_segment_ops splits them). Default 128; GRIMOIRE_PROMPT_SEGMENT=N sets it.
    void set_prompt_segment_ops(size_t n) { prompt_segment_ops_ = n; }
    // Every step (decode included) is also flushed once after its first `n` recorded ops, so the GPU runs them
    // while the host records the rest of the step: a 27B decode step is ~700 ops, ~0.2 ms of host recording
    // that otherwise ran before any kernel did. The host records ~25 times faster than the GPU runs them, so
    // one early flush suffices; the step then replays as two graphs. 0 turns it off. Default 32;
    // GRIMOIRE_FIRST_SEGMENT=N sets it.
    void set_first_segment_ops(size_t n) { first_segment_ops_ = n; }
    void add_bias(Tensor& x, const Tensor& bias) override;

    // ---- fused ops (decode: one kernel per op, or two/three for the attention and DeltaNet cores; prompts of
    // many tokens run the unfused sequence, whose kernels are already large) ----
    void add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& w, float eps, NormKind kind, Tensor& out) override;
    void gated_attention_core(const Tensor& qg, Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                              float eps, const Tensor& positions, const RopeParams& rope, Tensor& k_cache,
                              Tensor& v_cache, int64_t n_past, float scale, Tensor& out) override;
    void gdn_core(const Tensor& mixed, const Tensor& conv_w, Tensor& conv_state, const Tensor& a, const Tensor& b,
                  const Tensor& A_log, const Tensor& dt_bias, Tensor& state, const Tensor& z, const Tensor& norm_w,
                  float eps, int64_t n_k_heads, Tensor& out) override;
    bool fuses_gdn_ba(int64_t T, const Tensor& ba_w) const override;
    void gdn_core_conv(const Tensor& conv, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                       Tensor& state, const Tensor& z, bool z_prior, const Tensor& norm_w, float eps, int64_t n_k_heads,
                       Tensor& out) override;
    void gdn_core_ba(const Tensor& conv, const Tensor& x, const Tensor& ba_w, const Tensor& A_log,
                     const Tensor& dt_bias, Tensor& state, const Tensor& z, bool z_prior, const Tensor& norm_w,
                     float eps, int64_t n_k_heads, Tensor& out) override;

    // The next projection's weight asked of L2 by the next DeltaNet step or gated attention decode
    // (kernels/cuda/l2_prefetch.h): the hints are kept until an op is recorded, and those two ops take them.
    // At most l2_prefetch_cap() bytes an op (0: hints ignored); GRIMOIRE_L2_PREFETCH_MB sets it (default 0: at 48
    // MB the 27B decode measured 11-13% slower on the H100, docs/BENCHMARKS.md session 31).
    void l2_prefetch(const void* data, size_t bytes) override;

    // ---- CUDA-only ----
    void set_l2_prefetch_cap(size_t bytes) { pf_cap_ = bytes; }
    size_t l2_prefetch_cap() const { return pf_cap_; }
    // Bytes the ops took from hints so far (each recording of an op that took some).
    uint64_t l2_prefetch_taken() const { return pf_taken_; }
    // Greedy / sampled token selection on the device: logits [R, V] -> out [R] I32 (device).
    void argmax(const Tensor& logits, Tensor& out) override;
    void sample(const Tensor& logits, const Tensor& uniform, float temperature, int top_k, float top_p, Tensor& out);
    void set_graphs(bool on) {
        materialize_split();
        graph_->set_enabled(on);
    }
    bool graphs() const { return graph_->enabled(); }
    // Every replay checked against a fresh capture (StepGraph::set_check; GRIMOIRE_GRAPH_CHECK=1 at start).
    void set_graph_check(bool on) {
        materialize_split();
        graph_->set_check(on);
    }
    const cuda::StepGraph::Stats& graph_stats() const { return graph_->stats(); }
    // Per-op device times of the steps flushed while on (see StepGraph::set_profiling); the report clears them.
    void set_profiling(bool on) {
        materialize_split();
        graph_->set_profiling(on);
    }
    std::string profile_report() {
        materialize_split();
        return graph_->profile_report();
    }
    void set_random_weights(uint64_t seed) { random_seed_ = seed; }
    // "weights X GiB, state ..., workspace ..., scratch ..." for banners.
    std::string memory_report() const;
    cudaStream_t stream() const { return stream_; }

    // ---- hooks for the quantized linears (src/backend/cuda/quant_linear.cpp) ----
    bool random_weights() const override { return random_seed_.has_value(); }
    // Records a launch like the built-in ops do (runs now when graphs are off, else at the next sync point).
    void record(uint64_t key, std::function<void(cudaStream_t)> fn, const char* tag = "quant") {
        rec(tag, key, std::move(fn));
    }
    // Persistent device buffer in the weights pool, filled from `host` (or left uninitialised when null).
    void* weight_buffer(size_t bytes, const void* host);
    // Workspaces every quantized linear shares (ops run one after another on one stream). reserve_* grow them
    // (zero-filled) and must be called at load time, before any step that uses them is recorded.
    enum class QuantWs { PARTIALS, COUNTERS, DEQUANT, NUM };
    void reserve_quant_ws(QuantWs which, size_t bytes);
    void* quant_ws(QuantWs which) const { return quant_ws_[static_cast<int>(which)].ptr; }
    size_t quant_ws_bytes(QuantWs which) const { return quant_ws_[static_cast<int>(which)].bytes; }
    // The cuBLAS workspace, also lent to the cuBLASLt calls of the FP8 prefill GEMM (one stream: never concurrent).
    void* cublas_workspace() const { return cublas_ws_; }
    static size_t cublas_workspace_bytes();
    // Salted seed for a random-weights fill of the named tensor (requires random_weights()).
    uint64_t random_seed_for(const std::string& name) const;

private:
    Tensor make(DType dtype, std::initializer_list<int64_t> shape, cuda::Pool pool);
    Tensor make_shaped(DType dtype, const std::vector<int64_t>& shape, cuda::Pool pool);
    // Pinned staging for values that change per step (see class comment); flushes when full.
    void* stage(const void* host, size_t bytes);
    // A device int slot holding `value` at this point of the step (for kernels reading n_past).
    const int* device_int(int64_t value);
    void gemm(const Tensor& x, const Tensor& w, Tensor& out, cudaStream_t s);
    void fill_random(Tensor& t, const std::string& name);
    // Every op records through rec() and every sync point flushes through flush_all(): both first record a
    // deferred split (see matmul_split), so no op can read a stacked group's parts before they are filled.
    void rec(const char* tag, uint64_t key, std::function<void(cudaStream_t)> fn) {
        materialize_split();
        graph_->record(key, std::move(fn), tag);
        pending_pf_.n = 0;  // hints are for the op right after them (the taker reads them before it records)
        if (first_segment_ops_ && !first_segment_done_ && graph_->pending_ops() >= first_segment_ops_ &&
            graph_->enabled() && !graph_->profiling()) {
            first_segment_done_ = true;
            flush_all();
        }
    }
    void flush_all() const {
        materialize_split();
        graph_->flush();
        ++flushes_;
    }
    void materialize_split() const;
    // Before freeing memory that recorded ops or cached graphs use: runs what is recorded, waits for it, and drops
    // the graphs (a graph's node stays bound to the allocation it was made with, even where a new one later lands
    // at the same address and so matches its key).
    void release_graphs();
    // The deferred split's output and parts viewed in place in it (row stride y.cols()) when its parts are
    // exactly `want`, in order; the split is then dropped: the fused prompt cores read the parts from y, and
    // the parts' own buffers are never written (every caller is those parts' only reader).
    struct InPlaceSplit {
        Tensor y;
        std::vector<Tensor> parts;
    };
    std::optional<InPlaceSplit> take_split(std::initializer_list<const Tensor*> want);
    void report_upload(size_t bytes);

    std::string name_;
    DType act_ = DType::BF16;
    cudaStream_t stream_ = nullptr;
    cublasHandle_t cublas_ = nullptr;
    std::unique_ptr<cuda::DeviceMemory> mem_;
    std::unique_ptr<cuda::PinnedArena> pinned_;
    void* staging_host_ = nullptr;  // host_staging's page-locked buffer (cudaMallocHost), grown on demand
    size_t staging_bytes_ = 0;
    std::unique_ptr<cuda::StepGraph> graph_;  // created after the stream
    // A stacked group's split_cols not recorded yet: the one-GEMM output and the parts it fills.
    struct PendingSplit {
        Tensor y;
        std::vector<Tensor> parts;
    };
    mutable std::optional<PendingSplit> pending_split_;
    // The last zero() launch while it can still take more ranges (see zero()), and the graph epoch after it.
    std::shared_ptr<cuda::ZeroRanges> zero_batch_;
    uint64_t zero_seq_ = 0;
    void* attn_ws_ = nullptr;
    size_t attn_ws_bytes_ = 0;
    void* cublas_ws_ = nullptr;
    int* int_slots_ = nullptr;  // device ints for per-step scalars
    std::vector<cudaEvent_t> d2h_events_;  // to_host_async's events, reused step after step (graph nodes)
    int n_d2h_ = 0;                        // tickets handed out since reset_scratch
    int n_int_slots_ = 0;
    // device_int's last slot, reused for the same value until the next flush: every attention layer of a step
    // asks for n_past, and each copy was a memcpy node that broke the programmatic-launch chain between the
    // q | k | v projection and the attention kernels.
    mutable uint64_t flushes_ = 0;
    struct IntSlot {
        const int* slot = nullptr;
        int64_t value = 0;
        uint64_t flushes = 0;
    } int_cache_;
    int n_sm_ = 132;
    bool hopper_ = false;
    bool stack_split_ = true;
    size_t prompt_segment_ops_ = 128;
    size_t first_segment_ops_ = 32;
    bool first_segment_done_ = false;  // this step's early flush happened (reset by reset_scratch)
    std::optional<uint64_t> random_seed_;
    // l2_prefetch's hints since the last recorded op, and what they may add up to.
    cuda::L2Prefetch take_l2_prefetch(cuda::KeyHasher& key);  // the pending hints (cleared), added to key
    cuda::L2Prefetch pending_pf_;
    size_t pf_cap_ = 0;
    uint64_t pf_taken_ = 0;
    struct WsBuf {
        void* ptr = nullptr;
        size_t bytes = 0;
    };
    WsBuf quant_ws_[static_cast<int>(QuantWs::NUM)];
    // upload progress
    size_t uploaded_ = 0;
    double upload_t0_ = 0, last_report_ = 0;
    bool reported_ = false;
};

}  // namespace grimoire
