// Tokenizer encode/decode throughput on English prose, one thread.
//
//   build/<preset>/bench/bench_tokenizer [--shared ../shared] [--mb 10] [--python /work/pyenv/bin/python]
//                                        [--text FILE]
//
// Reads the first --mb MB of ../shared/data/corpus/gutenberg-150M.txt.zst (cut at a line end), loads the real
// Qwen3 tokenizer and times: encode with an empty word cache (cold: what a fresh server sees on new text),
// encode again (warm cache), and decode. With --python, the Hugging Face `tokenizers` library encodes the same
// text in the same run as an anchor (single thread: RAYON_NUM_THREADS=1). --text reads the first --mb MB of an
// uncompressed file instead of the corpus (for machines without zstd). Prints one JSON object.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <unistd.h>
#include <string>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU time of this thread: on a shared, oversubscribed machine wall time measures the neighbours too.
double thread_cpu_s() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string read_corpus(const std::string& shared, const std::string& text_file, size_t bytes) {
    const std::string cmd = (text_file.empty() ? "zstd -dc '" + shared + "/data/corpus/gutenberg-150M.txt.zst'"
                                               : "cat '" + text_file + "'") +
                            " | head -c " + std::to_string(bytes);
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return {};
    std::string out;
    char buf[1 << 16];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    pclose(p);
    out.resize(out.rfind('\n') + 1);
    return out;
}

// MB/s of the `tokenizers` library on the text in `path`: {whole text in one encode() call, the same text cut
// into paragraphs and given to encode_batch()} (it is much faster on short inputs), or -1s.
std::pair<double, double> hf_mb_per_s(const std::string& python, const std::string& shared, const std::string& path) {
    const std::string script =
        "import time, transformers\n"
        "t = transformers.AutoTokenizer.from_pretrained('" + shared + "/data/tokenizers/qwen3').backend_tokenizer\n"
        "s = open('" + path + "', encoding='utf-8').read()\n"
        "mb = len(s.encode()) / 1e6\n"
        "t0 = time.perf_counter(); t.encode(s, add_special_tokens=False); whole = time.perf_counter() - t0\n"
        "parts = [p + '\\n\\n' for p in s.split('\\n\\n')]\n"
        "t0 = time.perf_counter(); t.encode_batch(parts, add_special_tokens=False); batch = time.perf_counter() - t0\n"
        "print(mb / whole, mb / batch)\n";
    const std::string py_path = path + ".py";
    std::ofstream(py_path) << script;
    const std::string cmd = "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false " + python + " " + py_path + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    double whole = -1, batch = -1;
    if (p && std::fscanf(p, "%lf %lf", &whole, &batch) != 2) whole = batch = -1;
    if (p) pclose(p);
    std::remove(py_path.c_str());
    return {whole, batch};
}

}  // namespace

int main(int argc, char** argv) {
    std::string shared = std::string(GRIMOIRE_SOURCE_DIR) + "/../shared", python, text_file;
    double mb = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--shared") shared = argv[i + 1];
        else if (a == "--mb") mb = std::atof(argv[i + 1]);
        else if (a == "--python") python = argv[i + 1];
        else if (a == "--text") text_file = argv[i + 1];
    }
    const std::string text = read_corpus(shared, text_file, static_cast<size_t>(mb * 1e6));
    if (text.empty()) {
        std::fprintf(stderr, "bench_tokenizer: cannot read the corpus under %s\n", shared.c_str());
        return 1;
    }
    auto t0 = Clock::now();
    const auto tok = grimoire::Tokenizer::load(shared + "/data/tokenizers/qwen3");
    const double load_s = seconds_since(t0);

    t0 = Clock::now();
    double c0 = thread_cpu_s();
    const auto ids = tok->encode(text);
    const double cold_s = seconds_since(t0), cold_cpu_s = thread_cpu_s() - c0;
    t0 = Clock::now();
    c0 = thread_cpu_s();
    const auto ids2 = tok->encode(text);
    const double warm_s = seconds_since(t0), warm_cpu_s = thread_cpu_s() - c0;
    t0 = Clock::now();
    const std::string back = tok->decode(ids);
    const double decode_s = seconds_since(t0);

    std::pair<double, double> hf{-1, -1};
    if (!python.empty()) {
        const std::string path = "/tmp/grimoire_bench_tokenizer_" + std::to_string(::getpid()) + ".txt";
        std::ofstream(path, std::ios::binary) << text;
        hf = hf_mb_per_s(python, shared, path);
        std::remove(path.c_str());
    }
    const double mbytes = static_cast<double>(text.size()) / 1e6;
    std::printf(
        "{\"bytes\": %zu, \"tokens\": %zu, \"load_s\": %.3f, \"encode_mb_per_s\": %.2f, "
        "\"encode_cpu_mb_per_s\": %.2f, \"encode_warm_mb_per_s\": %.2f, \"encode_warm_cpu_mb_per_s\": %.2f, "
        "\"decode_mb_per_s\": %.2f, \"hf_tokenizers_mb_per_s\": %.2f, \"hf_tokenizers_batch_mb_per_s\": %.2f, "
        "\"round_trip_ok\": %s, "
        "\"ratio_vs_5mb_target\": %.2f, \"ratio_vs_hf_batch\": %.2f}\n",
        text.size(), ids.size(), load_s, mbytes / cold_s, mbytes / cold_cpu_s, mbytes / warm_s, mbytes / warm_cpu_s,
        mbytes / decode_s, hf.first, hf.second, back == text && ids == ids2 ? "true" : "false",
        mbytes / cold_s / 5.0, hf.second > 0 ? mbytes / cold_s / hf.second : 0.0);
    return back == text ? 0 : 1;
}
