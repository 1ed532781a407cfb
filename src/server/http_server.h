// The HTTP side of `grimoire serve`: routes, authentication, body limits, and the per-request loop that
// submits a Task to the engine and streams (SSE) or collects its answer. Every failure becomes an OpenAI error
// body with its status; nothing a client sends can stop the server.
//
// Routes: GET /health, GET /v1/models, GET /metrics, POST /v1/chat/completions, POST /v1/completions,
// POST /tokenize, POST /detokenize. The API key (when set) guards /v1/* and the tokenizer routes.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/metrics.h"
#include "server/prompt.h"
#include "server/queue.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace grimoire::server {

struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8000;
    std::vector<std::string> served_names;  // first is the primary name; all are accepted as `model`
    std::string api_key;                    // empty: no authentication
    size_t max_body_bytes = 8u << 20;       // larger bodies get 413
    std::string model_dir;                  // reported as `root` in /v1/models
    std::string fingerprint = "grimoire-0.1.0";
};

class HttpServer {
public:
    HttpServer(ServerConfig cfg, const PromptBuilder& prompts, TaskQueue& queue, Metrics& metrics);
    ~HttpServer();

    bool bind();  // false when host:port cannot be bound
    void run();   // serves until stop()
    // Graceful shutdown, step 1: generation routes answer 503 and /health reports draining.
    void begin_drain() { draining_ = true; }
    void stop();  // step 2: close the listening socket and let run() return

private:
    using Clock = std::chrono::steady_clock;
    struct Stream;

    void routes();
    void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat);
    void handle_tokenize(const httplib::Request& req, httplib::Response& res);
    void handle_detokenize(const httplib::Request& req, httplib::Response& res);
    void check_auth(const httplib::Request& req) const;
    std::string check_model(const std::string& requested) const;
    bool pump(Stream& s, bool streaming, std::string& out);
    void observe(Stream& s, const std::vector<TokenEvent>& events);

    ServerConfig cfg_;
    const PromptBuilder& prompts_;
    TaskQueue& queue_;
    Metrics& metrics_;
    std::unique_ptr<httplib::Server> svr_;
    std::atomic<bool> draining_{false};
    int64_t started_at_;
};

}  // namespace grimoire::server
