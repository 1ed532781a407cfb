#include "core/threadpool.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace grimoire {

int cpu_threads() {
    static const int n = [] {
        if (const char* e = std::getenv("GRIMOIRE_THREADS")) {
            const int v = std::atoi(e);
            if (v > 0) return v;
        }
        return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }();
    return n;
}

namespace {

// Workers sleep on a generation counter; parallel_for publishes a job, bumps the generation and
// takes chunk 0 itself. One job at a time (a mutex serialises callers from different threads), so
// parallel_for must not be called from inside a parallel_for body (it would deadlock).
class Pool {
public:
    explicit Pool(int n) {
        for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lk(m_);
            stop_ = true;
            ++gen_;
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
    }
    int size() const { return static_cast<int>(workers_.size()) + 1; }

    void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int parts) {
        std::lock_guard<std::mutex> job_lock(job_m_);
        {
            std::lock_guard<std::mutex> lk(m_);
            fn_ = &fn;
            n_ = n;
            parts_ = parts;
            pending_ = parts - 1;
            ++gen_;
        }
        cv_.notify_all();
        chunk(0);
        std::unique_lock<std::mutex> lk(m_);
        done_cv_.wait(lk, [&] { return pending_ == 0; });
        fn_ = nullptr;
    }

private:
    void chunk(int i) {
        const int64_t b = n_ * i / parts_, e = n_ * (i + 1) / parts_;
        if (b < e) (*fn_)(b, e);
    }
    void loop(int i) {
        uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lk(m_);
                cv_.wait(lk, [&] { return gen_ != seen; });
                seen = gen_;
                if (stop_) return;
                if (i >= parts_) continue;
            }
            chunk(i);
            std::lock_guard<std::mutex> lk(m_);
            if (--pending_ == 0) done_cv_.notify_one();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex m_, job_m_;
    std::condition_variable cv_, done_cv_;
    uint64_t gen_ = 0;
    bool stop_ = false;
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
    int parts_ = 1;
    int pending_ = 0;
};

Pool& pool() {
    static Pool p(cpu_threads());
    return p;
}

}  // namespace

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
    if (n <= 0) return;
    const int threads = cpu_threads();
    const int64_t parts = std::min<int64_t>(threads, std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
    if (parts <= 1) {
        fn(0, n);
        return;
    }
    pool().run(n, fn, static_cast<int>(parts));
}

}  // namespace grimoire
