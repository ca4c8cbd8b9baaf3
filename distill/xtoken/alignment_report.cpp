// `retort distill align`: tokenize a corpus with both tokenizers, align every document, sum statistics and times.
#include "distill/xtoken/alignment_report.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <iterator>

#include "core/data/byte_level_bpe.h"
#include "core/data/corpus.h"
#include "core/data/tokenizer.h"
#include "core/util/error.h"
#include "distill/xtoken/canonical_strings.h"
#include "distill/xtoken/tokenizer_spans.h"

namespace retort::distill::xtoken {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t count_characters(std::string_view text) {
  int64_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// The documents to align: the --text file whole, or the corpus's documents, within max_bytes.
std::vector<std::string> documents_of(const AlignmentReportRequest& request) {
  const bool text = !request.text.empty(), corpus = !request.corpus.empty();
  if (text == corpus) {
    throw InputError("distill align: give the text to align as --text FILE or --corpus SPEC (one of them)");
  }
  if (request.max_bytes < 0) {
    throw InputError(
        fmt::format("distill align: --max-bytes {} is negative: give 0 (all) or a byte count", request.max_bytes));
  }
  std::vector<std::string> documents;
  if (text) {
    const std::vector<std::filesystem::path> files = data::resolve_corpus(request.text.string());
    std::ifstream in(files.at(0), std::ios::binary);
    documents.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    documents = data::read_documents(data::resolve_corpus(request.corpus));
  }
  if (request.max_bytes > 0) {
    int64_t total = 0;
    size_t kept = 0;
    for (; kept < documents.size() && total < request.max_bytes; ++kept) {
      std::string& d = documents[kept];
      if (total + int64_t(d.size()) > request.max_bytes) {
        size_t cut = size_t(request.max_bytes - total);
        while (cut > 0 && (static_cast<unsigned char>(d[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
        d.resize(cut);
      }
      total += int64_t(d.size());
    }
    documents.resize(kept);
  }
  // Both tokenizers must read the same characters: ill-formed bytes become U+FFFD first, as a tokenizer.json does.
  for (std::string& d : documents) d = data::utf8_with_replacement(d);
  return documents;
}

std::string describe(const data::Tokenizer& tokenizer) {
  return fmt::format("{} ({}, {} ids)", tokenizer.model_path().string(), tokenizer.kind(), tokenizer.vocab_size());
}

bool same_chunks(const Alignment& a, const Alignment& b) {
  if (a.chunks.size() != b.chunks.size()) return false;
  for (size_t k = 0; k < a.chunks.size(); ++k) {
    const Chunk &x = a.chunks[k], &y = b.chunks[k];
    if (x.student_begin != y.student_begin || x.student_end != y.student_end || x.teacher_begin != y.teacher_begin ||
        x.teacher_end != y.teacher_end || x.correct != y.correct) {
      return false;
    }
  }
  return true;
}

nlohmann::json stats_json(const AlignmentStats& s) {
  nlohmann::json shapes = nlohmann::json::object(), correct = nlohmann::json::object();
  for (int k = 0; k < kChunkShapes; ++k) {
    shapes[shape_name(ChunkShape(k))] = s.chunks_by_shape[size_t(k)];
    correct[shape_name(ChunkShape(k))] = s.correct_chunks_by_shape[size_t(k)];
  }
  return {{"chunks", s.chunks},
          {"correct_chunks", s.correct_chunks},
          {"chunks_by_shape", shapes},
          {"correct_chunks_by_shape", correct},
          {"student_tokens", s.student_tokens},
          {"teacher_tokens", s.teacher_tokens},
          {"student_share_aligned", s.student_share()},
          {"teacher_share_aligned", s.teacher_share()}};
}

std::string stats_text(const AlignmentStats& s) {
  std::string out = fmt::format("  {:<14}{:>10}{:>10}\n", "shape", "chunks", "correct");
  for (int k = 0; k < kChunkShapes; ++k) {
    out += fmt::format("  {:<14}{:>10}{:>10}\n", shape_name(ChunkShape(k)), s.chunks_by_shape[size_t(k)],
                       s.correct_chunks_by_shape[size_t(k)]);
  }
  out += fmt::format("  {:<14}{:>10}{:>10}\n", "all", s.chunks, s.correct_chunks);
  out += fmt::format("  aligned       student {:.2f}% of {} tokens, teacher {:.2f}% of {} tokens\n",
                     100 * s.student_share(), s.student_tokens, 100 * s.teacher_share(), s.teacher_tokens);
  return out;
}

double rate(int64_t characters, double seconds) {
  return seconds > 0 ? double(characters) / seconds : 0.0;
}

}  // namespace

double AlignmentReport::characters_per_second() const {
  return rate(characters, align_seconds);
}
double AlignmentReport::string_characters_per_second() const {
  return rate(characters, string_align_seconds);
}
double AlignmentReport::tokenize_characters_per_second() const {
  return rate(characters, tokenize_seconds);
}

AlignmentReport report_alignment(const AlignmentReportRequest& request) {
  const std::vector<std::string> documents = documents_of(request);
  const data::Tokenizer student = data::Tokenizer::load(request.student_tokenizer);
  const data::Tokenizer teacher = data::Tokenizer::load(request.teacher_tokenizer);
  AlignmentReport report;
  report.student_tokenizer = describe(student);
  report.teacher_tokenizer = describe(teacher);
  report.strings = request.strings;
  for (const std::string& document : documents) {
    ++report.documents;
    report.bytes += int64_t(document.size());
    report.characters += count_characters(document);
    auto start = Clock::now();
    const SideTokens s = side_tokens(student, document), t = side_tokens(teacher, document);
    report.tokenize_seconds += seconds_since(start);
    start = Clock::now();
    const Alignment by_offsets = align_by_offsets(s, t);
    report.align_seconds += seconds_since(start);
    report.stats.add(alignment_stats(by_offsets));
    if (request.strings) {
      const std::vector<std::string> ss = canonical_token_strings(student, s), ts = canonical_token_strings(teacher, t);
      start = Clock::now();
      const Alignment by_strings = align_by_strings(ss, s.roles, ts, t.roles);
      report.string_align_seconds += seconds_since(start);
      report.string_stats.add(alignment_stats(by_strings));
      report.string_documents_equal += same_chunks(by_offsets, by_strings) ? 1 : 0;
    }
  }
  report.warning = low_alignment_warning(report.stats);
  if (report.warning) spdlog::warn("distill align: {}", *report.warning);
  return report;
}

std::string format_alignment_report(const AlignmentReport& r) {
  std::string out = fmt::format(
      "\n  student       {}\n  teacher       {}\n  text          {} documents, {} bytes, {} characters\n\n"
      "offset alignment\n{}",
      r.student_tokenizer, r.teacher_tokenizer, r.documents, r.bytes, r.characters, stats_text(r.stats));
  out += fmt::format(
      "  speed         {:.3g} characters/s on one core ({:.3f} s); tokenizing both sides {:.3g} "
      "characters/s ({:.3f} s)\n",
      r.characters_per_second(), r.align_seconds, r.tokenize_characters_per_second(), r.tokenize_seconds);
  if (r.strings) {
    out += fmt::format("\nstring alignment (Needleman-Wunsch)\n{}", stats_text(r.string_stats));
    out += fmt::format("  speed         {:.3g} characters/s on one core ({:.3f} s)\n", r.string_characters_per_second(),
                       r.string_align_seconds);
    out += fmt::format("  same chunks as the offsets in {} of {} documents\n", r.string_documents_equal, r.documents);
  }
  if (r.warning) out += "\n  warning: " + *r.warning + "\n";
  return out;
}

nlohmann::json alignment_report_json(const AlignmentReport& r) {
  nlohmann::json j = {{"student_tokenizer", r.student_tokenizer},
                      {"teacher_tokenizer", r.teacher_tokenizer},
                      {"documents", r.documents},
                      {"bytes", r.bytes},
                      {"characters", r.characters},
                      {"offsets", stats_json(r.stats)},
                      {"align_seconds", r.align_seconds},
                      {"characters_per_second", r.characters_per_second()},
                      {"tokenize_seconds", r.tokenize_seconds},
                      {"tokenize_characters_per_second", r.tokenize_characters_per_second()},
                      {"warning", r.warning ? nlohmann::json(*r.warning) : nlohmann::json(nullptr)}};
  if (r.strings) {
    j["strings"] = stats_json(r.string_stats);
    j["strings"]["align_seconds"] = r.string_align_seconds;
    j["strings"]["characters_per_second"] = r.string_characters_per_second();
    j["strings"]["documents_equal_to_offsets"] = r.string_documents_equal;
  }
  return j;
}

}  // namespace retort::distill::xtoken
