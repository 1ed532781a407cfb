#include "engine/engine.h"

#include <chrono>
#include <cstdio>
#include <vector>

#include "engine/generate.h"
#include "sample/sampler.h"

namespace grimoire {

Engine::Engine(Model& model, int64_t ctx, server::TaskQueue& queue, server::Metrics& metrics)
    : model_(model), queue_(queue), metrics_(metrics), state_(model.new_state(ctx)) {}

Engine::~Engine() { join(); }

void Engine::start() { thread_ = std::thread([this] { loop(); }); }

void Engine::join() {
    if (thread_.joinable()) thread_.join();
}

void Engine::loop() {
    while (auto task = queue_.pop()) {
        if (task->cancelled()) {
            metrics_.count_cancelled();
            task->finish({"cancelled", "", 0, 0});
            continue;
        }
        run(*task);
    }
}

void Engine::run(server::Task& task) {
    task.mark_started();
    state_->reset();
    std::vector<float> logprobs;
    auto on_token = [&](int32_t id, std::span<const float> logits) {
        server::TokenEvent ev;
        ev.id = id;
        if (task.logprobs) {
            // Logprobs of the raw model distribution, as OpenAI reports them (before penalties/temperature).
            log_softmax(logits.data(), int64_t(logits.size()), logprobs);
            ev.logprob = logprobs[size_t(id)];
            if (task.top_logprobs > 0) ev.top = top_logprobs(logprobs, task.top_logprobs);
        }
        ev.time = std::chrono::steady_clock::now();
        metrics_.add_engine_tokens(1);
        task.push_token(std::move(ev));
        return !task.cancelled();
    };
    GenerateOptions opts;
    opts.max_tokens = task.opts.max_tokens;
    opts.sampling = task.opts.sampling;
    opts.ignore_eos = task.opts.ignore_eos;
    opts.min_tokens = task.opts.min_tokens;
    opts.want_logits = task.logprobs;  // else greedy requests take Model::forward_greedy
    // generate() stops on extra_stop_ids even with ignore_eos; a client asking to ignore EOS (llama-benchy's
    // exact token counts) means the end-of-turn tokens too.
    if (!task.opts.ignore_eos) opts.extra_stop_ids = task.opts.stop_ids;
    try {
        GenerateStats st = generate(model_, *state_, task.prompt, opts, on_token);
        if (st.finish_reason == "cancelled") metrics_.count_cancelled();
        task.finish({st.finish_reason, "", st.prompt_tokens, st.generated_tokens});
    } catch (const std::exception& e) {
        // A failure inside one request (e.g. out of memory for scratch) ends that request, not the server.
        std::fprintf(stderr, "grimoire serve: generation failed: %s\n", e.what());
        task.finish({"error", e.what(), 0, 0});
    }
}

}  // namespace grimoire
