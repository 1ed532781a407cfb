#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/split_cols.h"
#include "kernels/cuda/zero_ranges.h"

namespace grimoire {

namespace {
constexpr size_t kInitialScratch = 64ull << 20;
constexpr size_t kPinnedBytes = 8ull << 20;
constexpr size_t kCublasWorkspace = 32ull << 20;
constexpr int kIntSlots = 16384;
constexpr int64_t kMaxAttnHeads = 128, kMaxAttnHeadDim = 256;

// Op identifiers mixed into each recorded launch's key.
enum Op : uint64_t {
    OP_H2D = 1, OP_ZERO, OP_COPY, OP_EMBED, OP_RMS, OP_RMSG, OP_ADD, OP_SCALE, OP_MULSIG, OP_SILU, OP_COLS, OP_ROPE,
    OP_ATTN, OP_CONV, OP_GDN, OP_GEMV, OP_GEMM, OP_BIAS, OP_ARGMAX, OP_SAMPLE, OP_SLOT, OP_SPLIT,
    OP_D2H
};

// Rough time of a cuBLAS GEMM [T, K] x [N, K]^T on `n_sm` SMs, in units of one 128x128 output tile's K loop:
// tiles run in waves of one per SM, so a part with fewer tiles than SMs costs a whole wave.
double gemm_waves(int64_t T, int64_t N, int n_sm) {
    const double tiles = std::ceil(static_cast<double>(T) / 128.0) * std::ceil(static_cast<double>(N) / 128.0);
    return std::ceil(tiles / n_sm);
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

cudaDataType_t cuda_type(DType t) {
    switch (t) {
        case DType::F32: return CUDA_R_32F;
        case DType::BF16: return CUDA_R_16BF;
        case DType::F16: return CUDA_R_16F;
        default: throw Error("cuda matmul: unsupported dtype " + std::string(dtype_name(t)));
    }
}

bool ends_with(const std::string& s, const char* suf) {
    const size_t n = std::strlen(suf);
    return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}
}  // namespace

CudaBackend::CudaBackend(int dev, DType act) : act_(act) {
    if (act != DType::BF16 && act != DType::F32) throw Error("cuda backend: activations must be BF16 or F32");
    GRIMOIRE_CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop{};
    GRIMOIRE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    n_sm_ = prop.multiProcessorCount;
    hopper_ = prop.major >= 9;  // the bulk L2 prefetch (l2_prefetch) is sm_90's
    // On by default (measured on the H200: 512-token 27B prompt 0.559 -> 0.564 of GEMM, host launch time 14.6 ->
    // 8.6 ms); GRIMOIRE_DENSE_STACK=0 runs one GEMM per part (before / after comparisons).
    if (const char* e = std::getenv("GRIMOIRE_DENSE_STACK"); e && std::strcmp(e, "0") == 0) stack_split_ = false;
    if (const char* e = std::getenv("GRIMOIRE_PROMPT_SEGMENT")) prompt_segment_ops_ = std::strtoull(e, nullptr, 10);
    if (const char* e = std::getenv("GRIMOIRE_FIRST_SEGMENT")) first_segment_ops_ = std::strtoull(e, nullptr, 10);
    if (const char* e = std::getenv("GRIMOIRE_L2_PREFETCH_MB")) pf_cap_ = std::strtoull(e, nullptr, 10) << 20;
    name_ = std::string("cuda:") + std::to_string(dev) + " (" + prop.name + ", sm_" + std::to_string(prop.major) +
            std::to_string(prop.minor) + ")";
    GRIMOIRE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    graph_ = std::make_unique<cuda::StepGraph>(stream_);
    if (const char* e = std::getenv("GRIMOIRE_CUDA_GRAPHS"); e && std::strcmp(e, "0") == 0) graph_->set_enabled(false);
    mem_ = std::make_unique<cuda::DeviceMemory>(kInitialScratch);
    pinned_ = std::make_unique<cuda::PinnedArena>(kPinnedBytes);
    attn_ws_bytes_ = cuda::attention_ws_bytes(kMaxAttnHeads, kMaxAttnHeadDim);
    attn_ws_ = mem_->alloc(attn_ws_bytes_, cuda::Pool::WORKSPACE);
    cublas_ws_ = mem_->alloc(kCublasWorkspace, cuda::Pool::WORKSPACE);
    int_slots_ = static_cast<int*>(mem_->alloc(kIntSlots * sizeof(int), cuda::Pool::WORKSPACE));
    GRIMOIRE_CUBLAS_CHECK(cublasCreate(&cublas_));
    GRIMOIRE_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // A fixed workspace keeps cuBLAS from allocating inside a graph capture.
    GRIMOIRE_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_ws_, kCublasWorkspace));
}

size_t CudaBackend::cublas_workspace_bytes() { return kCublasWorkspace; }

CudaBackend::~CudaBackend() {
    try {
        flush_all();
    } catch (...) {
    }
    cudaStreamSynchronize(stream_);
    graph_.reset();
    for (cudaEvent_t e : d2h_events_) cudaEventDestroy(e);
    if (cublas_) cublasDestroy(cublas_);
    pinned_.reset();
    if (staging_host_) cudaFreeHost(staging_host_);
    mem_.reset();
    if (stream_) cudaStreamDestroy(stream_);
}

MemoryStats CudaBackend::memory() const {
    MemoryStats m;
    m.weights = mem_->used(cuda::Pool::WEIGHTS);
    m.state = mem_->used(cuda::Pool::STATE);
    m.scratch = mem_->scratch_capacity() + mem_->used(cuda::Pool::WORKSPACE);
    return m;
}

std::string CudaBackend::memory_report() const {
    auto g = [](size_t b) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
        return std::string(buf);
    };
    return name_ + ": weights " + g(mem_->used(cuda::Pool::WEIGHTS)) + ", state (KV + DeltaNet) " +
           g(mem_->used(cuda::Pool::STATE)) + ", workspace " + g(mem_->used(cuda::Pool::WORKSPACE)) + ", scratch " +
           g(mem_->scratch_capacity()) + " of " + g(mem_->device_total()) + " on the device";
}

// ---------------------------------------------------------------- memory

Tensor CudaBackend::make(DType dtype, std::initializer_list<int64_t> shape, cuda::Pool pool) {
    Tensor t(nullptr, dtype, Device::CUDA, shape);
    t.data = mem_->alloc(t.nbytes(), pool);
    return t;
}

Tensor CudaBackend::make_shaped(DType dtype, const std::vector<int64_t>& shape, cuda::Pool pool) {
    Tensor t;
    t.dtype = dtype;
    t.device = Device::CUDA;
    t.ndim = static_cast<int>(shape.size());
    for (int i = 0; i < t.ndim; ++i) t.shape[static_cast<size_t>(i)] = shape[static_cast<size_t>(i)];
    t.data = mem_->alloc(t.nbytes(), pool);
    return t;
}

void CudaBackend::report_upload(size_t bytes) {
    const double t = now_s();
    if (uploaded_ == 0) upload_t0_ = t;
    uploaded_ += bytes;
    // Only large checkpoints get a progress line; a few refreshes a second is enough.
    if (uploaded_ >= (1ull << 30) && t - last_report_ > 0.25) {
        const double gb = static_cast<double>(uploaded_) / 1e9, dt = t - upload_t0_;
        if (dt > 0.05)
            std::fprintf(stderr, "\rgrimoire: uploading weights to %s: %.1f GB (%.1f GB/s)   ", name_.c_str(), gb,
                         gb / dt);
        else  // device-side random fills are asynchronous: a rate would be meaningless
            std::fprintf(stderr, "\rgrimoire: uploading weights to %s: %.1f GB   ", name_.c_str(), gb);
        std::fflush(stderr);
        last_report_ = t;
        reported_ = true;
    }
}

void CudaBackend::fill_random(Tensor& t, const std::string& name) {
    // Scales that keep a random model's activations finite: unit-variance outputs for [N, K] projections,
    // decay parameters near 0 (A = exp(A_log) ~ 1), the gated norm's plain weight near 1.
    float amp = 0.02f, offset = 0.0f;
    if (ends_with(name, "A_log") || ends_with(name, "dt_bias")) amp = 0.5f;
    else if (ends_with(name, "linear_attn.norm.weight")) amp = 0.1f, offset = 1.0f;
    else if (ends_with(name, "norm.weight")) amp = 0.1f;
    else if (ends_with(name, "conv1d.weight")) amp = 0.5f;
    else if (name.find("embed_tokens") != std::string::npos) amp = 1.0f;
    else if (t.ndim == 2) amp = std::sqrt(3.0f / static_cast<float>(t.dim(1)));
    cuda::random_fill(t.data, t.dtype, t.numel(), random_seed_for(name), amp, offset, stream_);
}

uint64_t CudaBackend::random_seed_for(const std::string& name) const {
    GRIMOIRE_CHECK(random_seed_.has_value(), "random_seed_for without --random-weights");
    uint64_t seed = *random_seed_;
    for (char c : name) seed = seed * 1099511628211ull ^ static_cast<uint8_t>(c);
    return seed;
}

void* CudaBackend::weight_buffer(size_t bytes, const void* host) {
    void* p = mem_->alloc(bytes, cuda::Pool::WEIGHTS);
    if (host && bytes) {
        GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, stream_));
        GRIMOIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `host` may be freed after we return
    }
    report_upload(bytes);
    return p;
}

void CudaBackend::release_graphs() {
    flush_all();
    GRIMOIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    graph_->clear_cache();
}

void CudaBackend::reserve_quant_ws(QuantWs which, size_t bytes) {
    WsBuf& b = quant_ws_[static_cast<int>(which)];
    if (bytes <= b.bytes) return;
    release_graphs();
    if (b.ptr) mem_->free(b.ptr);
    b.ptr = mem_->alloc(bytes, cuda::Pool::WORKSPACE);
    b.bytes = bytes;
    GRIMOIRE_CUDA_CHECK(cudaMemsetAsync(b.ptr, 0, bytes, stream_));
    GRIMOIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Tensor CudaBackend::upload(const TensorInfo& t, DType as) {
    if (t.shape.size() > static_cast<size_t>(Tensor::kMaxDims))
        throw Error(t.file + ": tensor '" + t.name + "' has " + std::to_string(t.shape.size()) +
                    " dimensions (at most 4 supported)");
    if (as != t.dtype && as != DType::F32 && as != DType::BF16 && as != DType::F16)
        throw Error(t.file + ": tensor '" + t.name + "': cannot upload as " + std::string(dtype_name(as)));
    Tensor out = make_shaped(as, t.shape, cuda::Pool::WEIGHTS);
    if (random_seed_ && (as == DType::F32 || as == DType::BF16 || as == DType::F16)) {
        fill_random(out, t.name);
        report_upload(out.nbytes());
        return out;
    }
    if (as == t.dtype) {
        GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(out.data, t.data, out.nbytes(), cudaMemcpyHostToDevice, stream_));
    } else {
        const size_t n = static_cast<size_t>(t.numel());
        std::vector<float> f(n);
        convert_to_f32(t.dtype, t.data, f.data(), n);
        if (as == DType::F32) {
            GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(out.data, f.data(), n * 4, cudaMemcpyHostToDevice, stream_));
        } else {
            std::vector<uint16_t> h(n);
            for (size_t i = 0; i < n; ++i) h[i] = as == DType::BF16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
            GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(out.data, h.data(), n * 2, cudaMemcpyHostToDevice, stream_));
        }
    }
    GRIMOIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    report_upload(out.nbytes());
    return out;
}

Tensor CudaBackend::upload_raw(const void* host, DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t = make(dtype, shape, cuda::Pool::WEIGHTS);
    if (t.nbytes()) {
        GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(t.data, host, t.nbytes(), cudaMemcpyHostToDevice, stream_));
        GRIMOIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    return t;
}

Tensor CudaBackend::alloc_persistent(DType dtype, std::initializer_list<int64_t> shape) {
    if (reported_) {
        std::fprintf(stderr, "\n");
        reported_ = false;
    }
    Tensor t = make(dtype, shape, cuda::Pool::STATE);
    GRIMOIRE_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), stream_));
    return t;
}

void CudaBackend::free_persistent(Tensor& t) {
    if (!t.data) return;
    synchronize();  // recorded work may still use it
    mem_->free(t.data);
    t.data = nullptr;
}

Tensor CudaBackend::scratch(DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t(nullptr, dtype, Device::CUDA, shape);
    t.data = mem_->scratch(t.nbytes());
    return t;
}

void CudaBackend::reset_scratch() {
    flush_all();
    // Pinned staging and the int slots are rewritten by the next step: the copies out of them must be done.
    if (pinned_->used() > 0 || n_int_slots_ > 0 || mem_->scratch_overflowed())
        GRIMOIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    // Regrown scratch (its chunks freed, one larger allocated, often at a freed chunk's address): the cached
    // graphs referencing the old chunks are dropped, as for host_staging.
    if (mem_->reset_scratch()) graph_->clear_cache();
    pinned_->reset();
    n_int_slots_ = 0;
    first_segment_done_ = false;
    n_d2h_ = 0;
}

void CudaBackend::synchronize() {
    flush_all();
    GRIMOIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::to_host(const Tensor& t, void* host) const {
    flush_all();
    GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(host, t.data, t.nbytes(), cudaMemcpyDeviceToHost, stream_));
    GRIMOIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

int CudaBackend::to_host_async(const Tensor& t, void* host) {
    const size_t n = t.nbytes();
    const int ticket = n_d2h_++;
    while (d2h_events_.size() <= static_cast<size_t>(ticket)) {
        cudaEvent_t e;
        GRIMOIRE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        d2h_events_.push_back(e);
    }
    cudaEvent_t ev = d2h_events_[static_cast<size_t>(ticket)];
    const void* src = t.data;
    rec("d2h", cuda::KeyHasher().add(OP_D2H).add(host).add(src).add(static_cast<uint64_t>(n)).add(ev).h,
        [=](cudaStream_t s) {
            if (n) GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, s));
            // In a capture the event must be an external node to be waitable from the host; the flag is
            // refused outside one (cudaErrorIllegalState).
            cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
            GRIMOIRE_CUDA_CHECK(cudaStreamIsCapturing(s, &cs));
            GRIMOIRE_CUDA_CHECK(cs == cudaStreamCaptureStatusActive
                                    ? cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal)
                                    : cudaEventRecord(ev, s));
        });
    return ticket;
}

void CudaBackend::wait_host(int ticket) {
    if (ticket < 0 || ticket >= n_d2h_) throw Error("cuda wait_host: no such copy in this step");
    flush_all();
    GRIMOIRE_CUDA_CHECK(cudaEventSynchronize(d2h_events_[static_cast<size_t>(ticket)]));
}

void* CudaBackend::host_staging(size_t bytes) {
    if (bytes > staging_bytes_) {
        // The graphs' copy nodes into the old buffer go with it: their keys hold its address, and the new buffer
        // often gets the same one (cudaMallocHost reuses the range just freed), but a copy node stays bound to
        // the page-locked allocation it was made with. Replayed after the free it wrote through a stale mapping
        // (session 33, 27B bench: unspecified launch failure, or a crash inside cuGraphLaunch).
        release_graphs();
        if (staging_host_) cudaFreeHost(staging_host_);
        staging_host_ = nullptr, staging_bytes_ = 0;
        GRIMOIRE_CUDA_CHECK(cudaMallocHost(&staging_host_, bytes));
        staging_bytes_ = bytes;
    }
    return staging_host_;
}

void* CudaBackend::stage(const void* host, size_t bytes) {
    void* p = pinned_->take(bytes);
    if (!p) {
        // Full: run what is recorded, wait, and start the staging area over.
        synchronize();
        pinned_->reset();
        p = pinned_->take(bytes);
        if (!p) throw Error("cuda from_host: " + std::to_string(bytes) + " bytes exceed the pinned staging area");
    }
    std::memcpy(p, host, bytes);
    return p;
}

void CudaBackend::from_host(Tensor& t, const void* host) {
    const size_t n = t.nbytes();
    if (n == 0) return;
    if (n > kPinnedBytes / 2) {  // bulk data: copy now, in order with everything recorded before
        synchronize();
        GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(t.data, host, n, cudaMemcpyHostToDevice, stream_));
        GRIMOIRE_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return;
    }
    void* src = stage(host, n);
    void* dst = t.data;
    rec("h2d", cuda::KeyHasher().add(OP_H2D).add(dst).add(src).add(static_cast<uint64_t>(n)).h,
                   [=](cudaStream_t s) {
                       GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s));
                   });
}

const int* CudaBackend::device_int(int64_t value) {
    if (int_cache_.slot && int_cache_.value == value && int_cache_.flushes == flushes_) return int_cache_.slot;
    if (n_int_slots_ >= kIntSlots) synchronize(), n_int_slots_ = 0, pinned_->reset();
    int* slot = int_slots_ + n_int_slots_++;
    const int v = static_cast<int>(value);
    void* src = stage(&v, sizeof v);
    rec("slot", cuda::KeyHasher().add(OP_SLOT).add(slot).add(src).h, [=](cudaStream_t s) {
        GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(slot, src, sizeof(int), cudaMemcpyHostToDevice, s));
    });
    int_cache_ = {slot, value, flushes_};
    return slot;
}

void CudaBackend::zero(Tensor& t) {
    void* p = t.data;
    const size_t n = t.nbytes();
    if (n == 0) return;
    const uint64_t key = cuda::KeyHasher().add(OP_ZERO).add(p).add(static_cast<uint64_t>(n)).h;
    // Consecutive fills join one zero_ranges launch (SequenceState::reset: 96 tensors on the 27B, each its own
    // memset node before) while the recorded launch has not run yet.
    if (zero_batch_ && graph_->deferred() && zero_seq_ == graph_->epoch() && zero_batch_->n < cuda::kMaxZeroRanges) {
        zero_batch_->ptr[zero_batch_->n] = p;
        zero_batch_->bytes[zero_batch_->n++] = n;
        graph_->amend(key);
        return;
    }
    auto batch = std::make_shared<cuda::ZeroRanges>();
    batch->ptr[0] = p;
    batch->bytes[0] = n;
    batch->n = 1;
    const uint64_t flushes_before = flushes_;
    rec("zero", key, [batch](cudaStream_t s) { cuda::zero_ranges(*batch, s); });
    // rec() may have flushed this launch already (a step's first segment): it can take no more ranges then.
    zero_batch_ = graph_->deferred() && flushes_ == flushes_before ? batch : nullptr;
    zero_seq_ = graph_->epoch();
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
    if (src.numel() != dst.numel()) throw Error("cuda copy: element counts differ");
    Tensor a = src, b = dst;
    rec("copy", cuda::KeyHasher().add(OP_COPY).add(a).add(b).h, [=](cudaStream_t s) mutable {
        if (a.dtype == b.dtype) GRIMOIRE_CUDA_CHECK(cudaMemcpyAsync(b.data, a.data, a.nbytes(), cudaMemcpyDeviceToDevice, s));
        else cuda::convert(a, b, s);
    });
}

// ---------------------------------------------------------------- ops

void CudaBackend::embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
    Tensor o = out;
    rec("embed", cuda::KeyHasher().add(OP_EMBED).add(table).add(ids).add(o).h,
                   [=](cudaStream_t s) mutable { cuda::embedding(table, ids, o, s); });
}

void CudaBackend::rmsnorm(const Tensor& x, const Tensor& w, float eps, NormKind kind, Tensor& out) {
    Tensor o = out;
    rec("rms", cuda::KeyHasher().add(OP_RMS).add(x).add(w).addf(eps).add(static_cast<uint64_t>(kind)).add(o).h,
                   [=](cudaStream_t s) mutable { cuda::rmsnorm(x, w, eps, kind, o, s); });
}

void CudaBackend::rmsnorm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& out) {
    Tensor o = out;
    rec("rmsg", cuda::KeyHasher().add(OP_RMSG).add(x).add(z).add(w).addf(eps).add(o).h,
                   [=](cudaStream_t s) mutable { cuda::rmsnorm_gated(x, z, w, eps, o, s); });
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
    Tensor o = out;
    rec("add", cuda::KeyHasher().add(OP_ADD).add(a).add(b).add(o).h,
                   [=](cudaStream_t s) mutable { cuda::add(a, b, o, s); });
}

void CudaBackend::scale(Tensor& x, float v) {
    Tensor t = x;
    rec("scale", cuda::KeyHasher().add(OP_SCALE).add(t).addf(v).h,
                   [=](cudaStream_t s) mutable { cuda::scale(t, v, s); });
}

void CudaBackend::mul_sigmoid(Tensor& x, const Tensor& gate) {
    Tensor t = x;
    rec("mulsig", cuda::KeyHasher().add(OP_MULSIG).add(t).add(gate).h,
                   [=](cudaStream_t s) mutable { cuda::mul_sigmoid(t, gate, s); });
}

void CudaBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
    Tensor o = out;
    rec("silu", cuda::KeyHasher().add(OP_SILU).add(gate).add(up).add(o).h,
                   [=](cudaStream_t s) mutable { cuda::silu_mul(gate, up, o, s); });
}

void CudaBackend::copy_cols(const Tensor& src, int64_t c0, Tensor& out) {
    Tensor o = out;
    rec("cols", cuda::KeyHasher().add(OP_COLS).add(src).add(static_cast<uint64_t>(c0)).add(o).h,
                   [=](cudaStream_t s) mutable { cuda::copy_cols(src, c0, o, s); });
}

void CudaBackend::rope(Tensor& x, const Tensor& positions, const RopeParams& p) {
    Tensor t = x;
    cuda::KeyHasher k;
    k.add(OP_ROPE).add(t).add(positions).add(static_cast<uint64_t>(p.rot_dim)).add(static_cast<uint64_t>(p.neox));
    k.addf(p.attn_factor);
    for (float f : p.inv_freq) k.addf(f);
    rec("rope", k.h, [=](cudaStream_t s) mutable { cuda::rope(t, positions, p, s); });
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                            int64_t n_past, float scale, Tensor& out) {
    if (k_cache.ndim == 3 && (n_past < 0 || n_past + q.dim(0) > k_cache.dim(0)))
        throw Error("cuda attention: KV cache overflow (n_past " + std::to_string(n_past) + " + T " +
                    std::to_string(q.dim(0)) + " > " + std::to_string(k_cache.dim(0)) + ")");
    cuda::AttnArgs a;
    a.n_past = n_past;
    a.scale = scale;
    a.ws = attn_ws_;
    a.ws_bytes = attn_ws_bytes_;
    // With graphs the length comes from device memory so one captured decode step serves every length.
    if (graph_->enabled()) a.n_past_dev = device_int(n_past);
    Tensor kc = k_cache, vc = v_cache, o = out;
    cuda::KeyHasher key;
    key.add(OP_ATTN).add(q).add(k).add(v).add(kc).add(vc).add(o).addf(scale).add(a.n_past_dev);
    if (!a.n_past_dev) key.add(static_cast<uint64_t>(n_past));
    rec("attention", key.h, [=](cudaStream_t s) mutable { cuda::attention(q, k, v, kc, vc, a, o, s); });
}

void CudaBackend::conv1d_silu(const Tensor& x, const Tensor& w, Tensor& state, Tensor& out) {
    Tensor st = state, o = out;
    rec("conv", cuda::KeyHasher().add(OP_CONV).add(x).add(w).add(st).add(o).h,
                   [=](cudaStream_t s) mutable { cuda::conv1d_silu(x, w, st, o, s); });
}

void CudaBackend::gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                   const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& state,
                                   Tensor& out) {
    Tensor st = state, o = out;
    // The chunked prefill form needs a workspace of per-chunk matrices (scratch, so it is reused per step).
    const size_t wsb = q.ndim == 3 && v.ndim == 3
                           ? cuda::gated_delta_rule_ws_bytes(q.dim(0), v.dim(1), q.dim(2), v.dim(2), q.dtype) : 0;
    void* ws = wsb ? mem_->scratch(wsb) : nullptr;
    rec("gdn", cuda::KeyHasher().add(OP_GDN).add(q).add(k).add(v).add(a).add(b).add(A_log).add(dt_bias).add(st).add(o).add(ws).h,
                   [=](cudaStream_t s) mutable {
                       cuda::gated_delta_rule(q, k, v, a, b, A_log, dt_bias, st, o, ws, wsb, s);
                   });
}

void CudaBackend::gemm(const Tensor& x, const Tensor& w, Tensor& out, cudaStream_t s) {
    const int64_t T = x.rows(), K = x.cols(), N = w.dim(0);
    const float alpha = 1.0f, beta = 0.0f;
    // Row-major out [T, N] = x [T, K] w^T is column-major out^T [N, T] = w^T(op T on the [K, N] view) x^T.
    GRIMOIRE_CUBLAS_CHECK(cublasSetStream(cublas_, s));
    GRIMOIRE_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(T),
                                       static_cast<int>(K), &alpha, w.data, cuda_type(w.dtype), static_cast<int>(K),
                                       x.data, cuda_type(x.dtype), static_cast<int>(K), &beta, out.data,
                                       cuda_type(out.dtype), static_cast<int>(N), CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::matmul(const Tensor& x, const Tensor& w, Tensor& out) {
    if (w.ndim != 2 || x.cols() != w.dim(1) || out.numel() != x.rows() * w.dim(0))
        throw Error("cuda matmul: x [T, K], w [N, K], out [T, N] shapes disagree (K " + std::to_string(x.cols()) +
                    " vs " + std::to_string(w.ndim == 2 ? w.dim(1) : -1) + ")");
    const int64_t T = x.rows(), N = w.dim(0);
    Tensor o = out.view({T, N});
    const auto tag = [&](const char* what) {
        if (!graph_->profiling()) return what;
        return graph_->intern(std::string(what) + " T" + std::to_string(T) + " N" + std::to_string(N) + " K" +
                              std::to_string(x.cols()));
    };
    if (T <= cuda::kGemvMaxT) {
        rec(tag("gemv"), cuda::KeyHasher().add(OP_GEMV).add(x).add(w).add(o).h,
                       [=](cudaStream_t s) mutable { cuda::gemv(x, w, o, s); });
        return;
    }
    // cuBLAS wants x in w's dtype and out in w's dtype or F32: stage through scratch when they differ. In the
    // F32 reference mode the weight is widened instead, so the product stays fp32 throughout.
    Tensor wt = w;
    if (x.dtype == DType::F32 && w.dtype != DType::F32) wt = scratch(DType::F32, {N, w.dim(1)});
    Tensor xin = x;
    if (x.dtype != wt.dtype) xin = scratch(wt.dtype, {T, x.cols()});
    Tensor gout = o;
    const bool direct_out = o.dtype == wt.dtype || o.dtype == DType::F32;
    if (!direct_out) gout = scratch(DType::F32, {T, N});
    rec(tag("gemm"), cuda::KeyHasher().add(OP_GEMM).add(x).add(xin).add(w).add(wt).add(gout).add(o).h,
                   [=, this](cudaStream_t s) mutable {
                       if (wt.data != w.data) cuda::convert(w, wt, s);
                       if (xin.data != x.data) cuda::convert(x, xin, s);
                       gemm(xin, wt, gout, s);
                       if (gout.data != o.data) cuda::convert(gout, o, s);
                   });
    // Prompt segments (see set_prompt_segment_ops). Never while a split is deferred: the op after it decides
    // whether the split runs at all.
    if (prompt_segment_ops_ && graph_->enabled() && !graph_->profiling() && !pending_split_ &&
        graph_->pending_ops() >= prompt_segment_ops_)
        graph_->flush();
}

void CudaBackend::matmul_split(const Tensor& x, const Tensor& w, Tensor* ys, size_t n_ys) {
    const int64_t T = x.rows(), N = w.ndim == 2 ? w.dim(0) : 0, K = x.cols();
    if (T <= cuda::kGemvMaxT && n_ys >= 2 && n_ys <= static_cast<size_t>(cuda::kMaxSplitCols) && w.ndim == 2 &&
        x.cols() == w.dim(1)) {
        // Decode rows (a verify step's T = 2..8): one gemv over the stacked weight writing each part directly
        // (a gemv per part left the narrow DeltaNet b / a with a few blocks each).
        bool same = true;
        int64_t n = 0;
        for (size_t i = 0; i < n_ys; ++i) {
            same = same && ys[i].dtype == ys[0].dtype && ys[i].rows() == T;
            n += ys[i].cols();
        }
        if (same && n == N) {
            std::vector<Tensor> parts(ys, ys + n_ys);
            cuda::KeyHasher key;
            key.add(OP_GEMV).add(x).add(w).add(static_cast<uint64_t>(n_ys));
            for (const Tensor& p : parts) key.add(p);
            const char* tag = !graph_->profiling() ? "gemv_split"
                                                   : graph_->intern("gemv_split T" + std::to_string(T) + " N" +
                                                                    std::to_string(N) + " K" + std::to_string(K));
            rec(tag, key.h, [=](cudaStream_t s) {
                cuda::gemv_split(x, w, parts.data(), static_cast<int>(parts.size()), s);
            });
            return;
        }
    }
    bool one = stack_split_ && T > cuda::kGemvMaxT && n_ys >= 2 && n_ys <= static_cast<size_t>(cuda::kMaxSplitCols);
    for (size_t i = 0; i < n_ys; ++i) one = one && ys[i].dtype == act_ && ys[i].rows() == T;
    if (one) {
        // One GEMM + the split's copy (read + write of [T, N]) against a GEMM per part: the stacked GEMM wins
        // where narrow parts waste partial waves (DeltaNet b / a, N = 48; attention k / v, N = 1024; z at
        // T = 512), the per-part GEMMs where every part already fills the GPU (gate | up).
        double per_part = 0;
        for (size_t i = 0; i < n_ys; ++i) per_part += gemm_waves(T, ys[i].cols(), n_sm_);
        // One tile's K loop at ~7.5 TFLOP/s per SM; the copy at ~3 TB/s.
        const double tile_s = 2.0 * 128 * 128 * static_cast<double>(K) / 7.5e12;
        const double copy_s = 2.0 * static_cast<double>(T * N) * static_cast<double>(dtype_size(act_)) / 3e12;
        one = gemm_waves(T, N, n_sm_) * tile_s + copy_s < per_part * tile_s;
    }
    if (!one) return Backend::matmul_split(x, w, ys, n_ys);
    Tensor y = scratch(act_, {T, w.dim(0)});  // [T, N] act
    matmul(x, w, y);
    // The split is deferred: the next op either takes the parts in place from y (take_split) or, like any
    // other op or sync point, first records the split_cols that fills them (materialize_split).
    pending_split_ = PendingSplit{y, std::vector<Tensor>(ys, ys + n_ys)};
}

void CudaBackend::materialize_split() const {
    if (!pending_split_) return;
    const Tensor y = pending_split_->y;
    const std::vector<Tensor> parts = std::move(pending_split_->parts);
    pending_split_.reset();
    cuda::KeyHasher key;
    key.add(OP_SPLIT).add(y);
    for (const Tensor& p : parts) key.add(p);
    graph_->record("split_cols", key.h, [y, parts](cudaStream_t s) {
        cuda::split_cols(y, parts.data(), static_cast<int>(parts.size()), s);
    });
}

std::optional<CudaBackend::InPlaceSplit> CudaBackend::take_split(std::initializer_list<const Tensor*> want) {
    if (!pending_split_ || pending_split_->parts.size() != want.size()) return std::nullopt;
    InPlaceSplit r{pending_split_->y, {}};
    const size_t es = dtype_size(r.y.dtype);
    int64_t c0 = 0;
    size_t i = 0;
    for (const Tensor* t : want) {
        const Tensor& p = pending_split_->parts[i++];
        if (t->data != p.data || t->dtype != p.dtype || t->numel() != p.numel()) return std::nullopt;
        Tensor v = *t;  // the part's shape, its data in place: row stride y.cols()
        v.data = static_cast<char*>(r.y.data) + static_cast<size_t>(c0) * es;
        r.parts.push_back(v);
        c0 += p.cols();
    }
    pending_split_.reset();
    return r;
}

void CudaBackend::add_bias(Tensor& x, const Tensor& bias) {
    Tensor t = x;
    rec("bias", cuda::KeyHasher().add(OP_BIAS).add(t).add(bias).h,
                   [=](cudaStream_t s) mutable { cuda::add_bias(t, bias, s); });
}

void CudaBackend::argmax(const Tensor& logits, Tensor& out) {
    Tensor o = out;
    rec("argmax", cuda::KeyHasher().add(OP_ARGMAX).add(logits).add(o).h,
                   [=](cudaStream_t s) mutable { cuda::argmax(logits, o, s); });
}

void CudaBackend::sample(const Tensor& logits, const Tensor& uniform, float temperature, int top_k, float top_p,
                         Tensor& out) {
    Tensor o = out;
    rec("sample", cuda::KeyHasher().add(OP_SAMPLE).add(logits).add(uniform).addf(temperature)
                       .add(static_cast<uint64_t>(top_k)).addf(top_p).add(o).h,
                   [=](cudaStream_t s) mutable { cuda::sample(logits, uniform, temperature, top_k, top_p, o, s); });
}

// ---------------------------------------------------------------- fused ops (issue 4)

namespace {
// Keys of the fused ops' recorded launches (apart from the Op enum above, whose order is left alone).
constexpr uint64_t OP_ADD_RMS = 1001, OP_GATTN = 1002, OP_GDN_CORE = 1003;
// GRIMOIRE_CUDA_FUSED=0 runs the unfused sequences instead (for before/after measurements in one run).
bool fused_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("GRIMOIRE_CUDA_FUSED");
        return !(v && std::strcmp(v, "0") == 0);
    }();
    return on;
}
}  // namespace

void CudaBackend::add_rmsnorm(Tensor& x, const Tensor& y, const Tensor& w, float eps, NormKind kind, Tensor& out) {
    const bool ahead = take_linear_follows() && cuda::pdl_ahead_enabled();
    if (!fused_enabled()) {
        add(x, y, x);
        rmsnorm(x, w, eps, kind, out);
        return;
    }
    Tensor t = x, o = out;
    rec("add_rms", cuda::KeyHasher().add(OP_ADD_RMS).add(t).add(y).add(w).addf(eps).add(static_cast<uint64_t>(kind)).add(o)
                       .add(static_cast<uint64_t>(ahead)).h,
                   [=](cudaStream_t s) mutable { cuda::add_rmsnorm(t, y, w, eps, kind, o, s, ahead); });
}

void CudaBackend::gated_attention_core(const Tensor& qg, Tensor& k, const Tensor& v, const Tensor& q_norm,
                                       const Tensor& k_norm, float eps, const Tensor& positions,
                                       const RopeParams& rope_p, Tensor& k_cache, Tensor& v_cache, int64_t n_past,
                                       float scale, Tensor& out) {
    if (k_cache.ndim != 3 || k_cache.dim(2) == 0) throw Error("cuda gated_attention_core: k_cache must be [max_ctx, Hkv, D]");
    const int64_t T = qg.rows(), D = k_cache.dim(2);
    // The hint (model: o_proj follows) is taken on every path; decode lets o_proj launch ahead of the merge.
    const bool ahead = take_linear_follows() && cuda::pdl_ahead_mixer_enabled();
    if (T == 0) return;
    if (n_past < 0 || n_past + T > k_cache.dim(0))
        throw Error("cuda gated_attention_core: KV cache overflow (n_past " + std::to_string(n_past) + " + T " +
                    std::to_string(T) + " > " + std::to_string(k_cache.dim(0)) + ")");
    if (qg.numel() % (T * 2 * D) != 0) throw Error("cuda gated_attention_core: qg is not [T, Hq * 2D]");
    const int64_t Hq = qg.numel() / (T * 2 * D);
    if (!fused_enabled()) {
        gated_attention_core_unfused(qg, k, v, q_norm, k_norm, eps, positions, rope_p, k_cache, v_cache, n_past, scale,
                                     out);
        return;
    }
    Tensor q_ws = scratch(act_, {T, Hq, D});
    Tensor kc = k_cache, vc = v_cache, o = out;
    cuda::KeyHasher key;
    key.add(OP_GATTN).add(qg).add(k).add(v).add(q_norm).add(k_norm).addf(eps).add(positions).add(kc).add(vc);
    key.add(q_ws).add(o).addf(scale).add(static_cast<uint64_t>(rope_p.rot_dim)).add(static_cast<uint64_t>(rope_p.neox));
    key.addf(rope_p.attn_factor);
    for (float f : rope_p.inv_freq) key.addf(f);
    if (T > cuda::kAttnDecodeMaxT) {
        // A prompt: prep + flash prefill + the gate read in place from qg (the unfused sequence copied the query
        // and the gate out of qg and ran nine kernels). qg, k, v are read in place from the stacked GEMM's
        // output when they are the parts of its deferred split. The length comes from a device slot like
        // attention().
        Tensor qgi = qg, ki = k, vi = v;
        int64_t stride = 0;
        if (auto sp = take_split({&qg, &k, &v})) qgi = sp->parts[0], ki = sp->parts[1], vi = sp->parts[2], stride = sp->y.cols();
        const int* n_past_dev = graph_->enabled() ? device_int(n_past) : nullptr;
        key.add(n_past_dev).add(qgi).add(ki).add(vi).add(static_cast<uint64_t>(stride));
        if (!n_past_dev) key.add(static_cast<uint64_t>(n_past));
        rec("gattn_prefill", key.h, [=](cudaStream_t s) mutable {
            cuda::gated_attention_prefill(qgi, ki, vi, q_norm, k_norm, eps, positions, rope_p, kc, vc, n_past,
                                          n_past_dev, scale, q_ws, o, s, stride, stride);
        });
        return;
    }
    void* ws = attn_ws_;
    const size_t wsb = attn_ws_bytes_;
    // Decode and verify steps (T <= 8, the split-K decode kernels per token): each token's position (and so
    // its length) is read from positions[t] on the device: no per-step slot.
    cuda::KeyHasher pf_key;
    const cuda::L2Prefetch pf = take_l2_prefetch(pf_key);  // o_proj's weight, asked of L2 by the prep kernel
    key.add(pf_key.h).add(static_cast<uint64_t>(ahead));
    rec("gattn_decode", key.h, [=](cudaStream_t s) mutable {
        cuda::gated_attention_decode(qg, k, v, q_norm, k_norm, eps, positions, rope_p, kc, vc, scale, q_ws,
                                     ws, wsb, o, s, &pf, ahead);
    });
}

void CudaBackend::gdn_core(const Tensor& mixed, const Tensor& conv_w, Tensor& conv_state, const Tensor& a,
                           const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& state, const Tensor& z,
                           const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out) {
    if (state.ndim != 3) throw Error("cuda gdn_core: state must be [Hv, dk, dv]");
    const int64_t T = mixed.rows(), C = mixed.cols(), Hv = state.dim(0), dk = state.dim(1), dv = state.dim(2);
    const int64_t Hk = n_k_heads;
    if (!fused_enabled()) {
        gdn_core_unfused(mixed, conv_w, conv_state, a, b, A_log, dt_bias, state, z, norm_w, eps, n_k_heads, out);
        return;
    }
    if (Hk <= 0 || C != 2 * Hk * dk + Hv * dv) throw Error("cuda gdn_core: mixed is not [T, 2 Hk dk + Hv dv]");
    Tensor st = state, o = out;
    if (const size_t wsb = cuda::gated_delta_rule_ws_bytes(T, Hv, dk, dv, act_); wsb > 0) {
        // A long prompt: conv, the chunked DeltaNet reading q | k | v in place from the conv output (the
        // unfused sequence copied them apart first), the gated norm per value head. When mixed, z, b, a are
        // the parts of a deferred stacked-GEMM split, all three read them in place from its output instead.
        Tensor mx = mixed, zz = z, bb = b, aa = a;
        int64_t stride = 0;
        if (auto sp = take_split({&mixed, &z, &b, &a})) {
            mx = sp->parts[0], zz = sp->parts[1], bb = sp->parts[2], aa = sp->parts[3];
            stride = sp->y.cols();
        }
        Tensor conv = scratch(act_, {T, C}), cst = conv_state, cw = conv_w;
        rec("conv", cuda::KeyHasher().add(OP_CONV).add(mx).add(cw).add(cst).add(conv).add(static_cast<uint64_t>(stride)).h,
            [=](cudaStream_t s) mutable { cuda::conv1d_silu(mx, cw, cst, conv, s, stride); });
        void* ws = mem_->scratch(wsb);
        Tensor core = scratch(act_, {T, Hv, dv});
        rec("gdn_prefill", cuda::KeyHasher().add(OP_GDN).add(conv).add(static_cast<uint64_t>(Hk)).add(static_cast<uint64_t>(dk))
                .add(aa).add(bb).add(A_log).add(dt_bias).add(st).add(core).add(ws).add(static_cast<uint64_t>(wsb))
                .add(static_cast<uint64_t>(stride)).h,
            [=](cudaStream_t s) mutable {
                cuda::gated_delta_rule_qkv(conv, Hk, dk, aa, bb, A_log, dt_bias, st, core, ws, wsb, s, 0, stride);
            });
        const Tensor xr = core.view({T * Hv, dv}), zr = zz.view({T * Hv, dv});
        Tensor rows = o.view({T * Hv, dv});
        rec("rmsg", cuda::KeyHasher().add(OP_RMSG).add(xr).add(zr).add(norm_w).addf(eps).add(rows).add(static_cast<uint64_t>(stride)).h,
            [=](cudaStream_t s) mutable { cuda::rmsnorm_gated(xr, zr, norm_w, eps, rows, s, stride, stride ? Hv : 0); });
        return;
    }
    cuda::KeyHasher pf_key;
    const cuda::L2Prefetch pf = take_l2_prefetch(pf_key);  // out_proj's weight (before the conv is recorded)
    Tensor conv = scratch(act_, {T, C});
    conv1d_silu(mixed, conv_w, conv_state, conv);
    rec("gdn_core", cuda::KeyHasher().add(OP_GDN_CORE).add(conv).add(a).add(b).add(A_log).add(dt_bias).add(st).add(z)
                       .add(norm_w).addf(eps).add(static_cast<uint64_t>(Hk)).add(o).add(pf_key.h).h,
                   [=](cudaStream_t s) mutable {
                       cuda::gdn_step_fused(conv, a, b, A_log, dt_bias, st, z, norm_w, eps, Hk, o, s, true, &pf);
                   });
}

void CudaBackend::gdn_core_conv(const Tensor& conv, const Tensor& a, const Tensor& b, const Tensor& A_log,
                                const Tensor& dt_bias, Tensor& state, const Tensor& z, bool z_prior,
                                const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out) {
    if (state.ndim != 3) throw Error("cuda gdn_core: state must be [Hv, dk, dv]");
    const int64_t T = conv.rows(), Hv = state.dim(0), dk = state.dim(1), dv = state.dim(2);
    if (!fused_enabled() || cuda::gated_delta_rule_ws_bytes(T, Hv, dk, dv, act_) > 0) {
        Backend::gdn_core_conv(conv, a, b, A_log, dt_bias, state, z, z_prior, norm_w, eps, n_k_heads, out);
        return;
    }
    cuda::KeyHasher pf_key;
    const cuda::L2Prefetch pf = take_l2_prefetch(pf_key);
    Tensor st = state, o = out;
    rec("gdn_core", cuda::KeyHasher().add(OP_GDN_CORE).add(conv).add(a).add(b).add(A_log).add(dt_bias).add(st).add(z)
                       .add(static_cast<uint64_t>(z_prior)).add(norm_w).addf(eps).add(static_cast<uint64_t>(n_k_heads))
                       .add(o).add(pf_key.h).h,
        [=](cudaStream_t s) mutable {
            cuda::gdn_step_fused(conv, a, b, A_log, dt_bias, st, z, norm_w, eps, n_k_heads, o, s, z_prior, &pf);
        });
}

// One-token decode steps on Hopper: the b | a GEMV folded into the recurrence kernel (GRIMOIRE_GDN_BA=0: the
// separate GEMV, for A/B runs). The kernel takes up to 8 tokens, but a 4-token verify step measured 2% slower
// with it (the block's 8 dot products of 5120 then sit in front of the recurrence) while one token gained
// 0.5% of the 27B step (docs/BENCHMARKS.md, session 14), so verify steps keep the GEMV.
bool CudaBackend::fuses_gdn_ba(int64_t T, const Tensor& ba_w) const {
    static const bool on = [] {
        const char* e = std::getenv("GRIMOIRE_GDN_BA");
        return !(e && e[0] == '0');
    }();
    return on && T == 1 && fused_enabled() && act_ == DType::BF16 && ba_w.device == Device::CUDA &&
           cuda::gdn_step_ba_ok(T, 0, ba_w);  // dv 0: checked at the call, with the state
}

void CudaBackend::gdn_core_ba(const Tensor& conv, const Tensor& x, const Tensor& ba_w, const Tensor& A_log,
                              const Tensor& dt_bias, Tensor& state, const Tensor& z, bool z_prior,
                              const Tensor& norm_w, float eps, int64_t n_k_heads, Tensor& out) {
    if (state.ndim != 3) throw Error("cuda gdn_core_ba: state must be [Hv, dk, dv]");
    const int64_t T = conv.rows();
    if (!cuda::gdn_step_ba_ok(T, state.dim(2), ba_w) || x.rows() != T || x.cols() != ba_w.dim(1) ||
        ba_w.dim(0) != 2 * state.dim(0))
        throw Error("cuda gdn_core_ba: x [T, H] and ba_w [2 Hv, H] BF16 for T <= 8 tokens on Hopper");
    Tensor st = state, o = out;
    cuda::KeyHasher pf_key;
    const cuda::L2Prefetch pf = take_l2_prefetch(pf_key);
    const bool ahead = take_linear_follows() && cuda::pdl_ahead_mixer_enabled();
    cuda::KeyHasher key;
    key.add(OP_GDN_CORE).add(conv).add(x).add(ba_w).add(A_log).add(dt_bias).add(st).add(z);
    key.add(static_cast<uint64_t>(z_prior)).add(norm_w).addf(eps).add(static_cast<uint64_t>(n_k_heads));
    key.add(o).add(pf_key.h).add(static_cast<uint64_t>(ahead));
    rec("gdn_core", key.h, [=](cudaStream_t s) mutable {
        cuda::gdn_step_fused_ba(conv, x, ba_w, A_log, dt_bias, st, z, z_prior, norm_w, eps, n_k_heads, o, s,
                                &pf, ahead);
    });
}

void CudaBackend::l2_prefetch(const void* data, size_t bytes) {
    if (pf_cap_ == 0 || !data || bytes == 0 || pending_pf_.n >= cuda::kL2PrefetchRanges || !hopper_) return;
    size_t used = 0;
    for (int i = 0; i < pending_pf_.n; ++i) used += pending_pf_.bytes[i];
    // The bulk prefetch takes 16-byte aligned addresses and multiples of 16 bytes: the range trimmed inward.
    const uintptr_t a = (reinterpret_cast<uintptr_t>(data) + 15) & ~uintptr_t{15};
    const uintptr_t e = (reinterpret_cast<uintptr_t>(data) + bytes) & ~uintptr_t{15};
    if (e <= a || used >= pf_cap_) return;
    const size_t n = std::min<size_t>({static_cast<size_t>(e - a), pf_cap_ - used, size_t{0xFFFFFFF0u}}) & ~size_t{15};
    if (n == 0) return;
    pending_pf_.p[pending_pf_.n] = reinterpret_cast<const void*>(a);
    pending_pf_.bytes[pending_pf_.n] = static_cast<uint32_t>(n);
    ++pending_pf_.n;
}

cuda::L2Prefetch CudaBackend::take_l2_prefetch(cuda::KeyHasher& key) {
    const cuda::L2Prefetch pf = pending_pf_;
    pending_pf_.n = 0;
    for (int i = 0; i < pf.n; ++i) {
        key.add(pf.p[i]).add(static_cast<uint64_t>(pf.bytes[i]));
        pf_taken_ += pf.bytes[i];
    }
    return pf;
}

std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        if (why) *why = e != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(e) : "no CUDA device";
        return nullptr;
    }
    try {
        const char* act = std::getenv("GRIMOIRE_CUDA_ACT");
        const bool f32 = act && (std::strcmp(act, "f32") == 0 || std::strcmp(act, "F32") == 0);
        return std::make_unique<CudaBackend>(0, f32 ? DType::F32 : DType::BF16);
    } catch (const Error& err) {
        if (why) *why = err.what();
        return nullptr;
    }
}

}  // namespace grimoire
