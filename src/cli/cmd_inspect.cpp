// `grimoire inspect`: what a checkpoint is and what it needs. The model is really loaded onto the chosen
// backend (default CPU), so the figures are the ones `run` / `serve` will see, not estimates.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "model/model.h"

namespace grimoire::cli {

namespace {

std::string mib(size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

std::string count(int64_t n) {
    char buf[32];
    if (n >= 1000000000)
        std::snprintf(buf, sizeof buf, "%.2fB", static_cast<double>(n) / 1e9);
    else if (n >= 1000000)
        std::snprintf(buf, sizeof buf, "%.2fM", static_cast<double>(n) / 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.1fK", static_cast<double>(n) / 1e3);
    return buf;
}

int inspect(const std::string& model_arg, const std::string& device) {
    const std::string dir = model_arg.empty() ? default_model_dir() : model_arg;
    if (model_arg.empty() && !std::filesystem::is_directory(dir))
        throw Error("no --model given and the bundled demo model is missing (looked for " + dir + ")");
    auto be = make_backend(device);
    auto model = load_model(dir, *be);
    const ModelInfo& i = model->info();
    // Per-sequence state measured by allocating it at two lengths: the KV cache grows with the context, the
    // recurrent state of linear-attention layers (if any) does not.
    auto state_bytes = [&](int64_t ctx) {
        const size_t before = be->memory().state;
        auto st = model->new_state(ctx);
        return be->memory().state - before;
    };
    const size_t s1 = state_bytes(1), s1k = state_bytes(1025);
    const size_t per_1k = s1k - s1, fixed = s1 - per_1k / 1024;
    const auto max_ctx = static_cast<size_t>(std::max<int64_t>(i.max_position_embeddings, 0));
    std::string dtypes;
    for (const auto& d : i.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + d;
    std::string eos;
    for (int32_t e : i.eos_token_ids) eos += (eos.empty() ? "" : " ") + std::to_string(e);

    std::printf("model:         %s\n", dir.c_str());
    std::printf("architecture:  %s (model_type %s)\n", i.architecture.c_str(), i.model_type.c_str());
    std::printf("layers:        %lld, hidden %lld, vocab %lld, max context %lld\n",
                static_cast<long long>(i.num_layers), static_cast<long long>(i.hidden_size),
                static_cast<long long>(i.vocab_size), static_cast<long long>(i.max_position_embeddings));
    std::printf("parameters:    %s (%lld)\n", count(i.n_params).c_str(), static_cast<long long>(i.n_params));
    std::printf("dtypes:        %s\n", dtypes.c_str());
    std::printf("linears:       %s\n", linear_formats_summary(i).c_str());
    std::printf("bos / eos:     %d / %s\n", i.bos_token_id, eos.empty() ? "(none)" : eos.c_str());
    std::printf("memory on %s: weights %s, KV per 1K tokens %s, fixed state per sequence %s\n",
                be->name().c_str(), mib(i.weight_bytes).c_str(), mib(per_1k).c_str(), mib(fixed).c_str());
    std::printf("one sequence at max context (%zu tokens): %s\n", max_ctx,
                mib(i.weight_bytes + fixed + per_1k * max_ctx / 1024).c_str());
    return 0;
}

}  // namespace

Runner add_inspect_command(CLI::App& app) {
    auto model = std::make_shared<std::string>();
    auto device = std::make_shared<std::string>("cpu");
    CLI::App* sub =
        app.add_subcommand("inspect", "Print a checkpoint's architecture, parameters, dtypes and memory");
    sub->add_option("--model", *model, "Checkpoint directory (default: the bundled demo model, models/demo)");
    sub->add_option("--device", *device, "Backend whose memory use is reported: cpu, cuda or auto")
        ->capture_default_str()
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
    return [model, device] { return inspect(*model, *device); };
}

}  // namespace grimoire::cli
