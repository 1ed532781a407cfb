// `grimoire run`: generate text from a prompt. Only the generated text goes to stdout, streamed as it is
// produced (flushed per token, never half a UTF-8 character); the model banner and timings go to stderr.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "engine/generate.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace grimoire::cli {

namespace {

struct RunOptions {
    std::string model;
    std::string prompt;
    int64_t max_tokens = 256;
    float temperature = 1.0f;
    float top_p = 1.0f;
    int top_k = 0;
    int64_t seed = -1;  // < 0: random
    bool chat = false;
    bool output_ids = false;
    std::string device = "auto";
};

// The prompt's token ids: the chat template rendered for one user message when `chat`, and BOS in front when
// the tokenizer asks for it (and the rendered template did not already start with it). An empty prompt
// becomes BOS alone (the tokenizer's, else config.json's bos_token_id).
std::vector<int32_t> prompt_ids(const Tokenizer& tok, const RunOptions& o, int32_t model_bos) {
    std::string text = o.prompt;
    if (o.chat) {
        if (tok.chat_template().empty())
            throw Error(o.model + ": --chat given but the tokenizer has no chat template");
        nlohmann::ordered_json ctx = {
            {"messages", nlohmann::ordered_json::array({{{"role", "user"}, {"content", o.prompt}}})},
            {"add_generation_prompt", true},
            {"bos_token", tok.bos_token()},
            {"eos_token", tok.eos_token()}};
        text = ChatTemplate(tok.chat_template()).render(ctx);
    }
    std::vector<int32_t> ids;
    const bool has_bos_text = o.chat && !tok.bos_token().empty() && text.rfind(tok.bos_token(), 0) == 0;
    if (tok.add_bos() && tok.bos_id() >= 0 && !has_bos_text) ids.push_back(tok.bos_id());
    const std::vector<int32_t> body = tok.encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    // `--prompt ""` starts from BOS alone, also for tokenizers that do not add BOS to every prompt (Qwen).
    if (ids.empty() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
    if (ids.empty() && model_bos >= 0) ids.push_back(model_bos);
    if (ids.empty())
        throw Error("the prompt is empty and neither the tokenizer nor config.json has a BOS token");
    return ids;
}

int run(const RunOptions& o) {
    const std::string dir = o.model.empty() ? default_model_dir() : o.model;
    if (o.model.empty() && !std::filesystem::is_directory(dir))
        throw Error("no --model given and the bundled demo model is missing (looked for " + dir + ")");
    std::fprintf(stderr, "model: %s%s\n", dir.c_str(), o.model.empty() ? " (bundled demo model)" : "");
    auto be = make_backend(o.device);
    auto model = load_model(dir, *be);  // first: a bad config or tensor file is the error worth reporting
    auto tok = Tokenizer::load(dir);
    const ModelInfo& info = model->info();
    std::fprintf(stderr, "%s on %s: %.1fM parameters; linears: %s\n", info.architecture.c_str(),
                 be->name().c_str(), static_cast<double>(info.n_params) / 1e6, linear_formats_summary(info).c_str());

    const std::vector<int32_t> prompt = prompt_ids(*tok, o, info.bos_token_id);
    GenerateOptions g;
    g.max_tokens = o.max_tokens;
    g.want_logits = false;  // the callback prints ids or text: a greedy run takes Model::forward_greedy
    g.sampling.temperature = o.temperature;
    g.sampling.top_p = o.top_p;
    g.sampling.top_k = o.top_k;
    if (o.seed >= 0) {
        g.sampling.seed = static_cast<uint64_t>(o.seed);
        g.sampling.has_seed = true;
    }
    if (tok->eos_id() >= 0) g.extra_stop_ids.push_back(tok->eos_id());
    int64_t ctx = static_cast<int64_t>(prompt.size()) + o.max_tokens;
    if (info.max_position_embeddings > 0) ctx = std::min(ctx, info.max_position_embeddings);
    auto state = model->new_state(ctx);

    StreamDecoder dec(*tok, /*skip_special=*/true);
    std::vector<int32_t> generated;
    std::vector<int32_t> stops = g.extra_stop_ids;
    stops.insert(stops.end(), info.eos_token_ids.begin(), info.eos_token_ids.end());
    const GenerateStats st = generate(*model, *state, prompt, g, [&](int32_t id, std::span<const float>) {
        const bool is_stop = std::find(stops.begin(), stops.end(), id) != stops.end();
        if (o.output_ids) {
            generated.push_back(id);
        } else if (!is_stop) {  // the stop token's own text (e.g. "</s>") is not part of the answer
            const std::string piece = dec.push(id);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        }
        return true;
    });
    if (o.output_ids) {
        for (size_t i = 0; i < generated.size(); ++i) std::printf(i ? " %d" : "%d", generated[i]);
        std::printf("\n");
    } else {
        const std::string rest = dec.flush();
        std::fwrite(rest.data(), 1, rest.size(), stdout);
    }
    std::fflush(stdout);
    auto rate = [](int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; };
    std::fprintf(stderr, "\nprompt: %lld tokens, %.3f s, %.1f tokens/s\n",
                 static_cast<long long>(st.prompt_tokens), st.prompt_seconds,
                 rate(st.prompt_tokens, st.prompt_seconds));
    std::fprintf(stderr, "generated: %lld tokens, %.3f s, %.1f tokens/s (finish: %s)\n",
                 static_cast<long long>(st.generated_tokens), st.decode_seconds,
                 rate(st.generated_tokens, st.decode_seconds), st.finish_reason.c_str());
    return 0;
}

}  // namespace

Runner add_run_command(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* sub =
        app.add_subcommand("run", "Generate text from a prompt (text on stdout, timings on stderr)");
    sub->add_option("--model", o->model,
                    "Checkpoint directory (default: the bundled demo model, models/demo)");
    sub->add_option("--prompt", o->prompt, "Prompt text; \"\" starts from BOS alone")->required();
    sub->add_option("--max-tokens", o->max_tokens, "Tokens to generate at most")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--temperature", o->temperature, "Sampling temperature (0 = greedy)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--top-p", o->top_p, "Nucleus sampling mass")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    sub->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = all)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--seed", o->seed, "Random seed (same seed, same output)")->check(CLI::NonNegativeNumber);
    sub->add_flag("--chat", o->chat, "Apply the model's chat template to the prompt (one user message)");
    sub->add_flag("--output-ids", o->output_ids,
                  "Print the generated token ids (one line) instead of the text");
    sub->add_option("--device", o->device, "cpu, cuda or auto (CUDA when available)")
        ->capture_default_str()
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
    return [o] { return run(*o); };
}

}  // namespace grimoire::cli
