// End-to-end generation speed of one sequence through load_model + generate(): prefill tokens/s and decode
// tokens/s (greedy), with a memory-bandwidth roofline for decode measured in the same run (each decode step
// reads every weight once, so tokens/s <= copy bandwidth / weight bytes). Prints one JSON object.
//
//   bench_generate --model DIR [--prompt-tokens 128] [--gen-tokens 128] [--runs 3] [--device cpu]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "model/model.h"

using namespace grimoire;

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best-of-5 memcpy bandwidth over a buffer much larger than the caches (read + write bytes counted).
double copy_bandwidth_gbs() {
    const size_t n = size_t{256} << 20;
    std::vector<char> a(n, 1), b(n, 2);
    double best = 0;
    for (int r = 0; r < 5; ++r) {
        const double t0 = now_s();
        std::memcpy(b.data(), a.data(), n);
        const double dt = now_s() - t0;
        best = std::max(best, 2.0 * static_cast<double>(n) / dt / 1e9);
        std::swap(a, b);
    }
    return best;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    std::string dir, device = "cpu";
    int64_t n_prompt = 128, n_gen = 128, runs = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--model")
            dir = v;
        else if (k == "--prompt-tokens")
            n_prompt = std::stoll(v);
        else if (k == "--gen-tokens")
            n_gen = std::stoll(v);
        else if (k == "--runs")
            runs = std::stoll(v);
        else if (k == "--device")
            device = v;
    }
    if (dir.empty() || n_prompt < 1 || n_gen < 1 || runs < 1) {
        std::fprintf(stderr,
                     "usage: bench_generate --model DIR [--prompt-tokens N] [--gen-tokens N] [--runs R] "
                     "[--device cpu|cuda|auto]\n");
        return 2;
    }
    try {
        auto be = make_backend(device);
        auto model = load_model(dir, *be);
        const ModelInfo& info = model->info();
        // A deterministic prompt of ids spread over the vocabulary (content does not change the cost).
        std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
        for (int64_t i = 0; i < n_prompt; ++i)
            prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % info.vocab_size);
        GenerateOptions g;
        g.max_tokens = n_gen;
        g.want_logits = false;
        g.sampling.temperature = 0.0f;
        g.ignore_eos = true;
        std::vector<double> pre, dec;
        for (int64_t r = 0; r < runs; ++r) {
            auto st = model->new_state(n_prompt + n_gen);
            const GenerateStats s =
                generate(*model, *st, prompt, g, [](int32_t, std::span<const float>) { return true; });
            pre.push_back(static_cast<double>(s.prompt_tokens) / s.prompt_seconds);
            // The first token is sampled from the prefill's logits: decode steps = generated - 1.
            dec.push_back(static_cast<double>(s.generated_tokens - 1) / s.decode_seconds);
        }
        const double bw = copy_bandwidth_gbs();
        const double roof = bw * 1e9 / static_cast<double>(info.weight_bytes);
        nlohmann::ordered_json j;
        j["model"] = dir;
        j["architecture"] = info.architecture;
        j["backend"] = be->name();
        j["weight_bytes"] = info.weight_bytes;
        j["prompt_tokens"] = n_prompt;
        j["gen_tokens"] = n_gen;
        j["runs"] = runs;
        j["prefill_tok_s"] = median(pre);
        j["decode_tok_s"] = median(dec);
        j["copy_bandwidth_gb_s"] = bw;
        j["decode_roofline_tok_s"] = roof;
        j["decode_vs_roofline"] = median(dec) / roof;
        std::printf("%s\n", j.dump(2).c_str());
    } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
