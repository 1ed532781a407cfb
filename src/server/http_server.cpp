#include "server/http_server.h"

#include <httplib.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "server/api_error.h"
#include "server/response.h"

namespace grimoire::server {

namespace {

constexpr auto kWaitSlice = std::chrono::milliseconds(50);
// While a streamed request waits in the queue nothing is written, so a client that left would go unnoticed:
// an SSE comment line (ignored by clients) every 200 ms finds out (the second write after the peer closed
// fails), and the request is dropped from the queue.
constexpr auto kQueuedPing = std::chrono::milliseconds(200);

Route route_of(const std::string& path) {
    if (path == "/v1/chat/completions") return Route::CHAT;
    if (path == "/v1/completions") return Route::COMPLETIONS;
    if (path == "/tokenize") return Route::TOKENIZE;
    if (path == "/detokenize") return Route::DETOKENIZE;
    if (path == "/v1/models") return Route::MODELS;
    if (path == "/health") return Route::HEALTH;
    if (path == "/metrics") return Route::METRICS;
    return Route::OTHER;
}

void send_json(httplib::Response& res, int status, const ojson& body) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status();
    res.set_content(e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

}  // namespace

// One generation request in flight: the engine's Task and the builder that turns its events into responses.
struct HttpServer::Stream {
    std::shared_ptr<Task> task;
    std::unique_ptr<ResponseBuilder> builder;
    Clock::time_point t0, last_token, last_ping;
    bool first = true;
    bool finished = false;
    std::string error;  // the engine failed on this request
};

HttpServer::HttpServer(ServerConfig cfg, const PromptBuilder& prompts, TaskQueue& queue, Metrics& metrics)
    : cfg_(std::move(cfg)), prompts_(prompts), queue_(queue), metrics_(metrics),
      svr_(std::make_unique<httplib::Server>()), started_at_(int64_t(std::time(nullptr))) {
    if (cfg_.served_names.empty()) cfg_.served_names.push_back("default");
    // Every waiting client holds a thread: size the pool well above the expected concurrency so /health and
    // /metrics still answer while many requests queue.
    svr_->new_task_queue = [] { return new httplib::ThreadPool(64); };
    svr_->set_payload_max_length(cfg_.max_body_bytes);
    svr_->set_keep_alive_timeout(1);  // idle keep-alive connections do not hold up shutdown for long
    svr_->set_read_timeout(30);
    svr_->set_write_timeout(30);
    routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::bind() { return svr_->bind_to_port(cfg_.host, cfg_.port); }
void HttpServer::run() { svr_->listen_after_bind(); }
void HttpServer::stop() { svr_->stop(); }

void HttpServer::check_auth(const httplib::Request& req) const {
    if (cfg_.api_key.empty()) return;
    const std::string h = req.get_header_value("Authorization");
    if (h.empty()) throw unauthorized("Missing API key: send `Authorization: Bearer <key>`");
    if (h != "Bearer " + cfg_.api_key) throw unauthorized("Incorrect API key provided");
}

std::string HttpServer::check_model(const std::string& requested) const {
    if (requested.empty()) return cfg_.served_names.front();
    for (const auto& n : cfg_.served_names)
        if (n == requested) return requested;
    throw model_not_found(requested);
}

void HttpServer::routes() {
    auto& s = *svr_;
    s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        const bool ok = !draining_;
        send_json(res, ok ? 200 : 503, {{"status", ok ? "ok" : "draining"}});
        metrics_.count_request(Route::HEALTH, res.status);
    });
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics_.render(queue_.depth()), "text/plain; version=0.0.4");
        metrics_.count_request(Route::METRICS, 200);
    });
    s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
        try {
            check_auth(req);
            ojson data = ojson::array();
            for (const auto& n : cfg_.served_names)
                data.push_back({{"id", n},
                                {"object", "model"},
                                {"created", started_at_},
                                {"owned_by", "grimoire"},
                                {"root", cfg_.model_dir},
                                {"parent", nullptr},
                                {"max_model_len", prompts_.ctx()}});
            send_json(res, 200, {{"object", "list"}, {"data", data}});
        } catch (const ApiError& e) {
            send_error(res, e);
        }
        metrics_.count_request(Route::MODELS, res.status);
    });
    s.Post("/v1/chat/completions",
           [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, true); });
    s.Post("/v1/completions",
           [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, false); });
    s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { handle_tokenize(req, res); });
    s.Post("/detokenize",
           [this](const httplib::Request& req, httplib::Response& res) { handle_detokenize(req, res); });
    // Statuses cpp-httplib sets itself (413 body over the limit, 404 no route, 400 bad HTTP) get an
    // OpenAI error body too.
    s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        ApiError e = res.status == 413   ? payload_too_large(std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10),
                                                             cfg_.max_body_bytes)
                     : res.status == 404 ? not_found(req.method + " " + req.path)
                                         : ApiError(res.status, "The HTTP request could not be processed",
                                                    "invalid_request_error");
        send_error(res, e);
        metrics_.count_request(route_of(req.path), res.status);
    });
}

void HttpServer::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
    try {
        check_auth(req);
        const TokenizeRequest r = parse_tokenize_request(parse_body(req.body));
        if (r.chat) check_model(r.chat->model);
        const std::vector<int32_t> ids = r.chat ? prompts_.tokenize_text(prompts_.render(*r.chat), false)
                                                : prompts_.tokenize_text(*r.prompt, r.add_special_tokens);
        ojson body = {{"count", ids.size()}, {"max_model_len", prompts_.ctx()}, {"tokens", ids}};
        if (r.return_token_strs) {
            ojson strs = ojson::array();
            for (int32_t id : ids) strs.push_back(prompts_.tokenizer().token_to_piece(id));
            body["token_strs"] = strs;
        }
        send_json(res, 200, body);
    } catch (const ApiError& e) {
        send_error(res, e);
    }
    metrics_.count_request(Route::TOKENIZE, res.status);
}

void HttpServer::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
    try {
        check_auth(req);
        const std::vector<int32_t> ids = parse_detokenize_request(parse_body(req.body));
        for (int32_t id : ids)
            if (id >= prompts_.tokenizer().vocab_size())
                throw bad_request("Token id " + std::to_string(id) + " is out of the vocabulary", "tokens");
        send_json(res, 200, {{"prompt", prompts_.tokenizer().decode(ids)}});
    } catch (const ApiError& e) {
        send_error(res, e);
    }
    metrics_.count_request(Route::DETOKENIZE, res.status);
}

void HttpServer::observe(Stream& s, const std::vector<TokenEvent>& events) {
    for (const auto& e : events) {
        if (s.first) {
            metrics_.ttft.observe(std::chrono::duration<double>(e.time - s.t0).count());
            s.first = false;
        } else {
            metrics_.itl.observe(std::chrono::duration<double>(e.time - s.last_token).count());
        }
        s.last_token = e.time;
    }
}

// One wait on the task: turns what arrived into SSE text (streaming) and returns true once the response is
// complete. A stop string ends the response at once and cancels the engine's work on it.
bool HttpServer::pump(Stream& s, bool streaming, std::string& out) {
    std::vector<TokenEvent> events;
    std::optional<FinishEvent> fin;
    s.task->wait(events, fin, kWaitSlice);
    std::vector<ojson> chunks;
    if (!events.empty()) {
        observe(s, events);
        chunks = s.builder->on_tokens(events);
    }
    if (!fin && s.builder->done()) {
        s.task->cancel();
        fin = FinishEvent{"stop", "", 0, 0};
    }
    if (fin) {
        if (fin->reason == "error") s.error = fin->error.empty() ? "generation failed" : fin->error;
        for (auto& c : s.builder->on_finish(*fin)) chunks.push_back(std::move(c));
        s.finished = true;
        metrics_.add_generated_tokens(s.builder->completion_tokens());
        metrics_.e2e.observe(std::chrono::duration<double>(Clock::now() - s.t0).count());
        metrics_.set_running(-1);
        queue_.release(s.task.get());
    }
    if (streaming) {
        for (const auto& c : chunks) out += ResponseBuilder::sse(c);
        if (!s.error.empty()) out += ResponseBuilder::sse(internal_error(s.error).body());
        if (fin) out += "data: [DONE]\n\n";
    }
    return s.finished;
}

void HttpServer::handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    const Route route = chat ? Route::CHAT : Route::COMPLETIONS;
    auto s = std::make_shared<Stream>();
    s->t0 = s->last_ping = Clock::now();
    bool streaming = false;
    try {
        check_auth(req);
        if (draining_) throw unavailable("The server is shutting down");
        const ojson body = parse_body(req.body);
        Prepared prep;
        GenerationParams gen;
        std::string model;
        if (chat) {
            const ChatRequest r = parse_chat_request(body);
            model = check_model(r.model);
            prep = prompts_.chat(r);
            gen = r.gen;
        } else {
            const CompletionRequest r = parse_completion_request(body);
            model = check_model(r.model);
            prep = prompts_.completion(r);
            gen = r.gen;
        }
        TaskOptions opts;
        opts.max_tokens = prep.max_tokens;
        opts.sampling = gen.sampling;
        opts.ignore_eos = gen.ignore_eos;
        opts.min_tokens = gen.min_tokens;
        opts.stop_ids = prep.stop_ids;
        s->task = std::make_shared<Task>(prep.prompt, opts, gen.logprobs, gen.top_logprobs);
        s->builder = std::make_unique<ResponseBuilder>(
            prompts_.tokenizer(), prep, gen,
            ResponseMeta{chat, new_response_id(chat), int64_t(std::time(nullptr)), model, cfg_.fingerprint});
        if (!queue_.submit(s->task)) throw unavailable("The server is shutting down");
        metrics_.set_running(1);
        metrics_.add_prompt_tokens(int64_t(prep.prompt.size()));
        streaming = gen.stream;
    } catch (const ApiError& e) {
        send_error(res, e);
        metrics_.count_request(route, res.status);
        return;
    }

    if (!streaming) {
        std::string unused;
        while (!pump(*s, false, unused)) {
        }
        if (!s->error.empty()) send_error(res, internal_error(s->error));
        else send_json(res, 200, s->builder->full_response());
        metrics_.count_request(route, res.status);
        return;
    }

    metrics_.count_request(route, 200);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, s](size_t, httplib::DataSink& sink) {
            for (;;) {
                std::string out;
                const bool done = pump(*s, true, out);
                if (out.empty() && !done && !s->task->started() && Clock::now() - s->last_ping > kQueuedPing) {
                    out = ": queued\n\n";
                    s->last_ping = Clock::now();
                }
                if (!out.empty() && !sink.write(out.data(), out.size())) {
                    s->task->cancel();  // the client is gone: the engine stops within one step
                    return false;
                }
                if (done) {
                    sink.done();
                    return true;
                }
            }
        },
        [this, s](bool) {
            // Runs when the response ends for any reason; a stream cut short must still free its task.
            if (!s->finished) {
                s->task->cancel();
                metrics_.set_running(-1);
                queue_.release(s->task.get());
            }
        });
}

}  // namespace grimoire::server
