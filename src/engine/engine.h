// The engine thread: the only thread that touches the model. It pops Tasks from the server's TaskQueue one at
// a time, runs generate() on one SequenceState (allocated once, `ctx` tokens deep, reset per request) and
// pushes each sampled token, with its logprobs when asked, back to the Task. A cancelled Task stops within one
// step (the token callback returns false). Continuous batching replaces the one-at-a-time loop later; the
// queue interface stays.
#pragma once
#include <cstdint>
#include <memory>
#include <thread>

#include "model/model.h"
#include "server/metrics.h"
#include "server/queue.h"

namespace grimoire {

class Engine {
public:
    Engine(Model& model, int64_t ctx, server::TaskQueue& queue, server::Metrics& metrics);
    ~Engine();  // joins; the queue must have been closed

    void start();
    // Waits for the thread to leave its loop (after queue.close(), once the running task ends).
    void join();

private:
    void loop();
    void run(server::Task& task);

    Model& model_;
    server::TaskQueue& queue_;
    server::Metrics& metrics_;
    std::unique_ptr<SequenceState> state_;
    std::thread thread_;
};

}  // namespace grimoire
