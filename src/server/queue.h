// The hand-off between HTTP threads and the engine thread, and the only place in the server that locks.
//
// An HTTP thread builds a Task (prompt ids + options, validated), submits it to the TaskQueue and then waits
// on the Task for its token events; the engine thread pops Tasks one at a time, runs them and pushes events
// back. Either side may end a Task early: the HTTP side by cancel() (client gone, stop string matched,
// shutdown), the engine by finish(). A cancelled Task still in the queue is finished by the engine as soon as
// it is popped, so a waiting client that leaves costs nothing.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sample/sampler.h"

namespace grimoire::server {

struct TokenEvent {
    int32_t id = -1;
    float logprob = 0.0f;                           // filled when the task asked for logprobs
    std::vector<std::pair<int32_t, float>> top;     // top_logprobs alternatives, most likely first
    std::chrono::steady_clock::time_point time;
};

struct FinishEvent {
    std::string reason;  // "stop" | "length" | "cancelled" | "error"
    std::string error;   // message when reason == "error"
    int64_t prompt_tokens = 0, generated_tokens = 0;
};

// What the engine needs to run one request, already validated and resolved against the context.
struct TaskOptions {
    int64_t max_tokens = 0;
    SamplingParams sampling;
    bool ignore_eos = false;
    int64_t min_tokens = 0;
    std::vector<int32_t> stop_ids;  // end-of-turn ids besides the model's EOS ids
};

class Task {
public:
    Task(std::vector<int32_t> prompt, TaskOptions opts, bool logprobs, int top_logprobs)
        : prompt(std::move(prompt)), opts(std::move(opts)), logprobs(logprobs), top_logprobs(top_logprobs) {}

    // Inputs, immutable once submitted.
    const std::vector<int32_t> prompt;
    const TaskOptions opts;
    const bool logprobs;
    const int top_logprobs;

    void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
    bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
    bool started() const { return started_.load(std::memory_order_relaxed); }

    // Engine side.
    void mark_started() { started_.store(true, std::memory_order_relaxed); }
    void push_token(TokenEvent ev);
    void finish(FinishEvent ev);

    // HTTP side: waits up to `timeout` for events, then moves every token that arrived into `tokens`
    // (appending) and the finish event, once, into `fin`. Returns true when something arrived.
    bool wait(std::vector<TokenEvent>& tokens, std::optional<FinishEvent>& fin, std::chrono::milliseconds timeout);

private:
    std::atomic<bool> cancelled_{false}, started_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<TokenEvent> tokens_;
    std::optional<FinishEvent> fin_;
    bool fin_taken_ = false;
};

class TaskQueue {
public:
    // False once the queue is closed (shutting down): the caller answers 503.
    bool submit(std::shared_ptr<Task> t);
    // Blocks for the next task; nullptr once closed and empty.
    std::shared_ptr<Task> pop();
    // Stops accepting; tasks still queued are cancelled (and finished by the engine when popped).
    void close();
    size_t depth() const;

    // Tasks submitted and not yet released by their HTTP thread (queued or running): what a graceful
    // shutdown waits for, and cancels when its time is up.
    void release(const Task* t);
    size_t in_flight() const;
    void cancel_all();

private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Task>> q_;
    std::vector<std::shared_ptr<Task>> active_;
    bool closed_ = false;
};

}  // namespace grimoire::server
