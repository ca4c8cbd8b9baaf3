// Tokenizer encode throughput, one thread: each tokenizer.json (or SentencePiece .model) given encodes every plain
// file of a corpus folder (Debian's fortunes by default: .dat files, .u8 links and other links skipped, as the
// parity goldens do), one call per file, ids only and ids with offsets; after one warm-up pass, the median MB/s
// (10^6 bytes of UTF-8 input per second) over the repeats. bench/tokenizer_bench_hf.py measures Hugging Face
// tokenizers the same way; bench/run_tokenizer_bench.sh runs both and writes the table. With --documents each file is
// cut into its fortunes (the entries between lines that are exactly "%") and every entry is one encode call: the
// per-document calls a data pipeline makes, where a whole file in one call favours neither side's per-call cost.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include "bench/harness/bench_main.h"
#include "bench/harness/corpus_files.h"
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
  std::vector<std::string> texts;
  bytes = 0;
  for (const fs::path& file : bench::corpus_text_files(folder)) {
    texts.push_back(read_file(file));
    bytes += texts.back().size();
  }
  return texts;
}

// The entries of a fortunes file: the text between lines that are exactly "%" (the separators dropped).
std::vector<std::string> fortune_entries(const std::string& text) {
  std::vector<std::string> entries;
  std::string current;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::string_view line(text.data() + begin, end - begin);
    if (line == "%\n" || line == "%") {
      if (!current.empty()) entries.push_back(std::move(current));
      current.clear();
    } else {
      current.append(line);
    }
    begin = end;
  }
  if (!current.empty()) entries.push_back(std::move(current));
  return entries;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> tokenizers;
  std::string corpus = "/usr/share/games/fortunes", json_path;
  int64_t repeats = 3;
  bool documents = false;
  CLI::App app{"retort tokenizer encode throughput (one thread)"};
  app.add_option("--tokenizer", tokenizers, "NAME=PATH of a tokenizer.json or .model (repeatable)")->required();
  app.add_option("--corpus", corpus, "folder of text files")->capture_default_str();
  app.add_option("--repeats", repeats, "timed passes after one warm-up; the median is reported")->capture_default_str();
  app.add_flag("--documents", documents, "one encode call per fortune entry instead of per file");
  app.add_option("--json", json_path, "append one JSON object per tokenizer and mode to this file");
  CLI11_PARSE(app, argc, argv);
  return bench::run_reporting_rank("bench_tokenizer", [&] {
    size_t bytes = 0;
    std::vector<std::string> texts = corpus_texts(corpus, bytes);
    if (documents) {
      std::vector<std::string> entries;
      for (const std::string& text : texts)
        for (std::string& entry : fortune_entries(text)) entries.push_back(std::move(entry));
      texts = std::move(entries);
      bytes = 0;
      for (const std::string& text : texts) bytes += text.size();
    }
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
        const std::string mode = std::string(offsets ? "ids+offsets" : "ids") + (documents ? "/documents" : "");
        fmt::print("{:<10} {:<22} {:>8.2f} MB/s  ({} calls, {} bytes, {} tokens, load {:.2f} s)\n", name, mode, mb_s,
                   texts.size(), bytes, tokens, load_s);
        if (json) {
          json->write({{"bench", "tokenizer_encode"},
                       {"impl", "retort"},
                       {"tokenizer", name},
                       {"mode", mode},
                       {"mb_per_s", mb_s},
                       {"bytes", bytes},
                       {"calls", texts.size()},
                       {"tokens", tokens},
                       {"load_s", load_s},
                       {"threads", 1}});
        }
      }
    }
    return 0;
  });
}
