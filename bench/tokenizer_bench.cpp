// Tokenizer encode throughput, one thread: each tokenizer.json (or SentencePiece .model) given encodes every plain
// file of a corpus folder (Debian's fortunes by default: .dat files, .u8 links and other links skipped, as the
// parity goldens do), one call per file, ids only and ids with offsets; after one warm-up pass, the median MB/s
// (10^6 bytes of UTF-8 input per second) over the repeats. bench/tokenizer_bench_hf.py measures Hugging Face
// tokenizers the same way; bench/run_tokenizer_bench.sh runs both and writes the table.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include "bench/harness/bench_main.h"
#include "bench/harness/host_clock.h"
#include "bench/harness/json_lines.h"
#include "bench/harness/record_origin.h"
#include "bench/harness/sample_stats.h"
#include "core/data/tokenizer.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"

using namespace retort;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> corpus_texts(const fs::path& folder, size_t& bytes) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_symlink() || !entry.is_regular_file() || name.ends_with(".dat") || name.ends_with(".u8")) continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> texts;
  bytes = 0;
  for (const fs::path& file : files) {
    texts.push_back(read_file(file));
    bytes += texts.back().size();
  }
  return texts;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> tokenizers;
  std::string corpus = "/usr/share/games/fortunes", json_path;
  int64_t repeats = 3;
  CLI::App app{"retort tokenizer encode throughput (one thread)"};
  app.add_option("--tokenizer", tokenizers, "NAME=PATH of a tokenizer.json or .model (repeatable)")->required();
  app.add_option("--corpus", corpus, "folder of text files")->capture_default_str();
  app.add_option("--repeats", repeats, "timed passes after one warm-up; the median is reported")->capture_default_str();
  app.add_option("--json", json_path, "append one JSON object per tokenizer and mode to this file");
  CLI11_PARSE(app, argc, argv);
  return bench::run_reporting_rank("bench_tokenizer", [&] {
    size_t bytes = 0;
    const std::vector<std::string> texts = corpus_texts(corpus, bytes);
    RETORT_INPUT_CHECK(bytes > 0, "--corpus '{}' holds no text files", corpus);
    const bench::RecordOrigin origin = bench::record_origin("cpu");
    std::optional<bench::JsonLinesWriter> json;
    if (!json_path.empty()) json.emplace(json_path, bench::JsonLinesWriter::Mode::Append, origin);
    for (const std::string& spec : tokenizers) {
      const size_t eq = spec.find('=');
      RETORT_INPUT_CHECK(eq != std::string::npos, "--tokenizer '{}' is not NAME=PATH", spec);
      const std::string name = spec.substr(0, eq);
      bench::Stopwatch load_clock;
      const data::Tokenizer tokenizer = data::Tokenizer::load(spec.substr(eq + 1));
      const double load_s = load_clock.seconds();
      for (const bool offsets : {false, true}) {
        int64_t tokens = 0;
        const auto pass = [&] {
          tokens = 0;
          bench::Stopwatch clock;
          for (const std::string& text : texts) {
            tokens += static_cast<int64_t>(offsets ? tokenizer.encode_with_offsets(text).ids.size()
                                                   : tokenizer.encode(text).size());
          }
          return clock.seconds();
        };
        pass();
        std::vector<double> rates;
        for (int64_t r = 0; r < repeats; ++r) rates.push_back(static_cast<double>(bytes) / pass() / 1e6);
        const double mb_s = bench::median(rates);
        const char* mode = offsets ? "ids+offsets" : "ids";
        fmt::print("{:<10} {:<12} {:>8.2f} MB/s  ({} files, {} bytes, {} tokens, load {:.2f} s)\n", name, mode, mb_s,
                   texts.size(), bytes, tokens, load_s);
        if (json) {
          json->write({{"bench", "tokenizer_encode"},
                       {"impl", "retort"},
                       {"tokenizer", name},
                       {"mode", mode},
                       {"mb_per_s", mb_s},
                       {"bytes", bytes},
                       {"files", texts.size()},
                       {"tokens", tokens},
                       {"load_s", load_s},
                       {"threads", 1}});
        }
      }
    }
    return 0;
  });
}
