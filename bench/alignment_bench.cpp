// Cross-tokenizer alignment throughput, one thread: each pair of tokenizers reads every plain file of a corpus folder
// (Debian's fortunes by default; .dat files, .u8 links and other links skipped) and each --text file; the files are
// tokenized once (timed apart), then aligned by offsets (align_by_offsets) and by strings (align_by_strings over the
// canonical token strings), one call per file; after one warm-up pass, the median characters/s (code points of
// input per second) over the repeats, with the chunk statistics. SentencePiece pairs are trained here on the
// corpus (--sentencepiece-pair VOCAB_A,VOCAB_B). bench/run_alignment_bench.sh runs it and writes the table.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>

#include "bench/harness/bench_main.h"
#include "bench/harness/corpus_files.h"
#include "bench/harness/host_clock.h"
#include "bench/harness/json_lines.h"
#include "bench/harness/record_origin.h"
#include "bench/harness/sample_stats.h"
#include "core/data/byte_level_bpe.h"
#include "core/data/corpus.h"
#include "core/data/tokenizer.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "distill/xtoken/alignment.h"
#include "distill/xtoken/alignment_stats.h"
#include "distill/xtoken/canonical_strings.h"
#include "distill/xtoken/tokenizer_spans.h"

using namespace retort;
using namespace retort::distill::xtoken;
namespace fs = std::filesystem;

namespace {

struct Text {
  std::string name, bytes;
  int64_t characters = 0;
};

Text read_text(const fs::path& file) {
  Text t{file.filename().string(), data::utf8_with_replacement(read_file(file))};
  for (const char c : t.bytes) t.characters += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return t;
}

std::vector<Text> read_corpus(const fs::path& folder) {
  std::vector<Text> texts;
  for (const fs::path& file : bench::corpus_text_files(folder)) texts.push_back(read_text(file));
  return texts;
}

struct Pair {
  std::string name;
  std::shared_ptr<data::Tokenizer> student, teacher;
};

// Aligns every file of `texts` with the pair and writes the records of both paths.
void measure(const Pair& pair, const std::vector<Text>& texts, const std::string& group, int64_t repeats,
             std::optional<bench::JsonLinesWriter>& json) {
  int64_t characters = 0;
  bench::Stopwatch tokenize_clock;
  std::vector<SideTokens> s, t;
  for (const Text& text : texts) {
    s.push_back(side_tokens(*pair.student, text.bytes));
    t.push_back(side_tokens(*pair.teacher, text.bytes));
    characters += text.characters;
  }
  const double tokenize_s = tokenize_clock.seconds();
  std::vector<std::vector<std::string>> ss, ts;
  for (size_t k = 0; k < texts.size(); ++k) {
    ss.push_back(canonical_token_strings(*pair.student, s[k]));
    ts.push_back(canonical_token_strings(*pair.teacher, t[k]));
  }
  for (const char* path : {"offsets", "strings"}) {
    const bool strings = std::string_view(path) == "strings";
    AlignmentStats stats;
    // Timed: the alignment calls only, not the statistics.
    const auto timed_pass = [&] {
      stats = AlignmentStats{};
      double seconds = 0;
      for (size_t k = 0; k < texts.size(); ++k) {
        bench::Stopwatch clock;
        const Alignment a =
            strings ? align_by_strings(ss[k], s[k].roles, ts[k], t[k].roles) : align_by_offsets(s[k], t[k]);
        seconds += clock.seconds();
        stats.add(alignment_stats(a));
      }
      return seconds;
    };
    timed_pass();
    std::vector<double> rates;
    for (int64_t r = 0; r < repeats; ++r) rates.push_back(double(characters) / timed_pass());
    const double chars_s = bench::median(rates);
    fmt::print(
        "{:<22} {:<10} {:<8} {:>10.3g} chars/s  aligned {:6.2f}% / {:6.2f}%  chunks {} (1:1 {}, 1:N {}, N:1 {}, "
        "N:M {}, one-sided {})  tokenize {:.3g} chars/s\n",
        pair.name, group, path, chars_s, 100 * stats.student_share(), 100 * stats.teacher_share(), stats.chunks,
        stats.chunks_by_shape[0], stats.chunks_by_shape[1], stats.chunks_by_shape[2], stats.chunks_by_shape[3],
        stats.chunks_by_shape[4] + stats.chunks_by_shape[5], double(characters) / tokenize_s);
    if (json) {
      nlohmann::json shapes = nlohmann::json::object(), correct = nlohmann::json::object();
      for (int k = 0; k < kChunkShapes; ++k) {
        shapes[shape_name(ChunkShape(k))] = stats.chunks_by_shape[size_t(k)];
        correct[shape_name(ChunkShape(k))] = stats.correct_chunks_by_shape[size_t(k)];
      }
      json->write({{"bench", "xtoken_alignment"},
                   {"impl", "retort"},
                   {"pair", pair.name},
                   {"text", group},
                   {"path", path},
                   {"chars_per_s", chars_s},
                   {"characters", characters},
                   {"files", texts.size()},
                   {"student_tokens", stats.student_tokens},
                   {"teacher_tokens", stats.teacher_tokens},
                   {"chunks", stats.chunks},
                   {"correct_chunks", stats.correct_chunks},
                   {"chunks_by_shape", shapes},
                   {"correct_chunks_by_shape", correct},
                   {"student_share_aligned", stats.student_share()},
                   {"teacher_share_aligned", stats.teacher_share()},
                   {"tokenize_chars_per_s", double(characters) / tokenize_s},
                   {"threads", 1}});
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pairs, sentencepiece_pairs, extra_texts;
  std::string corpus = "/usr/share/games/fortunes", json_path;
  int64_t repeats = 3;
  CLI::App app{"retort cross-tokenizer alignment throughput (one thread)"};
  app.add_option("--pair", pairs, "NAME=STUDENT_PATH,TEACHER_PATH of two tokenizer files (repeatable)");
  app.add_option("--sentencepiece-pair", sentencepiece_pairs,
                 "VOCAB_A,VOCAB_B: two SentencePiece BPE tokenizers trained on the corpus (repeatable)");
  app.add_option("--corpus", corpus, "folder of text files")->capture_default_str();
  app.add_option("--text", extra_texts, "a text file measured on its own (repeatable)");
  app.add_option("--repeats", repeats, "timed passes after one warm-up; the median is reported")->capture_default_str();
  app.add_option("--json", json_path, "append one JSON object per pair, text and path to this file");
  CLI11_PARSE(app, argc, argv);
  return bench::run_reporting_rank("bench_alignment", [&] {
    const std::vector<Text> texts = read_corpus(corpus);
    RETORT_INPUT_CHECK(!texts.empty(), "--corpus '{}' holds no text files", corpus);
    std::vector<Pair> all;
    for (const std::string& spec : pairs) {
      const size_t eq = spec.find('='), comma = spec.find(',');
      RETORT_INPUT_CHECK(eq != std::string::npos && comma != std::string::npos && comma > eq,
                         "--pair '{}' is not NAME=STUDENT_PATH,TEACHER_PATH", spec);
      all.push_back({spec.substr(0, eq),
                     std::make_shared<data::Tokenizer>(data::Tokenizer::load(spec.substr(eq + 1, comma - eq - 1))),
                     std::make_shared<data::Tokenizer>(data::Tokenizer::load(spec.substr(comma + 1)))});
    }
    const fs::path scratch = fs::temp_directory_path() / fmt::format("retort_bench_alignment_{}", ::getpid());
    for (const std::string& spec : sentencepiece_pairs) {
      const size_t comma = spec.find(',');
      RETORT_INPUT_CHECK(comma != std::string::npos, "--sentencepiece-pair '{}' is not VOCAB_A,VOCAB_B", spec);
      std::vector<std::string> documents;
      for (const Text& t : texts) {
        for (std::string& d : data::split_documents(t.bytes)) documents.push_back(std::move(d));
      }
      auto train = [&](const std::string& vocab) {
        data::TokenizerTrainOptions options;
        options.vocab_size = std::stoll(vocab);
        options.model_path = scratch / ("sp" + vocab + ".model");
        return std::make_shared<data::Tokenizer>(data::Tokenizer::train(documents, options));
      };
      all.push_back({"sp" + spec.substr(0, comma) + "-sp" + spec.substr(comma + 1), train(spec.substr(0, comma)),
                     train(spec.substr(comma + 1))});
    }
    fs::remove_all(scratch);
    RETORT_INPUT_CHECK(!all.empty(), "give at least one --pair or --sentencepiece-pair");
    const bench::RecordOrigin origin = bench::record_origin("cpu");
    std::optional<bench::JsonLinesWriter> json;
    if (!json_path.empty()) json.emplace(json_path, bench::JsonLinesWriter::Mode::Append, origin);
    for (const Pair& pair : all) {
      measure(pair, texts, fs::path(corpus).filename().string(), repeats, json);
      for (const std::string& extra : extra_texts) {
        measure(pair, {read_text(extra)}, fs::path(extra).filename().string(), repeats, json);
      }
    }
    return 0;
  });
}
