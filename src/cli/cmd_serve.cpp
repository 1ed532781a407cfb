// `grimoire serve`: loads a checkpoint and serves the OpenAI-compatible HTTP API (src/server) with one engine
// thread (src/engine/engine.h). SIGTERM / SIGINT drain: new requests get 503, in-flight ones get
// --drain-timeout seconds to finish, then are cancelled; the process exits 0.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/prompt.h"
#include "server/queue.h"
#include "tokenizer/tokenizer.h"

namespace grimoire::cli {

namespace {

struct ServeOptions {
    std::string model, device = "auto";
    server::ServerConfig server;
    std::vector<std::string> names;
    int64_t ctx = 0;  // 0: the model's max_position_embeddings, at most 4096
    double drain_timeout = 10.0;
};

// Waits until `done()` or `seconds` pass.
template <class F>
bool wait_for(F done, double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done()) {
        if (std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

int serve(ServeOptions& o) {
    // Block the shutdown signals before any thread starts, so every thread inherits the mask and only the
    // sigwait below receives them.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    const bool model_given = !o.model.empty();
    if (!model_given) o.model = default_model_dir();
    auto backend = make_backend(o.device);
    auto model = load_model(o.model, *backend);
    auto tok = Tokenizer::load(o.model);
    const ModelInfo& info = model->info();
    int64_t ctx = o.ctx;
    if (ctx <= 0) ctx = info.max_position_embeddings > 0 ? std::min<int64_t>(info.max_position_embeddings, 4096) : 4096;
    server::PromptBuilder prompts(*tok, ctx);  // a template the interpreter cannot run fails here

    o.server.model_dir = std::filesystem::absolute(o.model).lexically_normal().string();
    o.server.served_names = o.names;
    if (o.server.served_names.empty()) {
        std::string base = std::filesystem::path(o.server.model_dir).filename().string();
        o.server.served_names.push_back(base.empty() ? "default" : base);
        if (model_given && o.model != base) o.server.served_names.push_back(o.model);  // the path as given
    }

    server::TaskQueue queue;
    server::Metrics metrics;
    Engine engine(*model, ctx, queue, metrics);
    server::HttpServer http(o.server, prompts, queue, metrics);
    if (!http.bind())
        throw Error("cannot listen on " + o.server.host + ":" + std::to_string(o.server.port) +
                    " (address in use or not available)");
    engine.start();
    std::thread http_thread([&] { http.run(); });
    std::fprintf(stderr,
                 "grimoire serve: %s (%s, %lld params; linears: %s) on %s, context %lld tokens, template: %s\n"
                 "grimoire serve: model name \"%s\"; listening on http://%s:%d\n",
                 o.server.model_dir.c_str(), info.architecture.c_str(), (long long)info.n_params,
                 linear_formats_summary(info).c_str(),
                 backend->name().c_str(), (long long)ctx, prompts.has_template() ? "yes" : "none",
                 o.server.served_names.front().c_str(), o.server.host.c_str(), o.server.port);

    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "grimoire serve: %s received, draining (up to %.0f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                 o.drain_timeout);
    http.begin_drain();
    if (!wait_for([&] { return queue.in_flight() == 0; }, o.drain_timeout)) {
        std::fprintf(stderr, "grimoire serve: cancelling %zu request(s) still running\n", queue.in_flight());
        queue.cancel_all();
    }
    queue.close();
    wait_for([&] { return queue.in_flight() == 0; }, 5.0);  // cancelled streams end within a step
    http.stop();
    http_thread.join();
    engine.join();
    std::fprintf(stderr, "grimoire serve: stopped\n");
    return 0;
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* c = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
    c->add_option("--model", o->model, "Checkpoint directory (default: the bundled demo model)");
    c->add_option("--host", o->server.host, "Address to listen on")->envname("GRIMOIRE_HOST")->capture_default_str();
    c->add_option("--port", o->server.port, "Port to listen on")->envname("GRIMOIRE_PORT")->capture_default_str();
    c->add_option("--served-model-name", o->names,
                  "Model name(s) clients use; the first is reported (default: the directory name)");
    c->add_option("--api-key", o->server.api_key, "Require `Authorization: Bearer KEY` on /v1 and tokenizer routes")
        ->envname("GRIMOIRE_API_KEY");
    c->add_option("--ctx", o->ctx, "Context length in tokens (default: the model's, at most 4096)");
    c->add_option("--max-body-bytes", o->server.max_body_bytes, "Largest request body accepted (else 413)")
        ->capture_default_str();
    c->add_option("--device", o->device, "auto, cpu or cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
        ->capture_default_str();
    c->add_option("--drain-timeout", o->drain_timeout, "Seconds in-flight requests get to finish on SIGTERM")
        ->capture_default_str();
    return [o] { return serve(*o); };
}

}  // namespace grimoire::cli
