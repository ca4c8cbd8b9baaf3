#pragma once
// `retort distill align`: how two tokenizers' readings of a corpus align. Every document is tokenized by both, aligned
// by offsets (and, on request, by strings), and the chunk statistics, the share of tokens in correct chunks and the
// speed of each stage are summed. The speed is the alignment's alone, on one core (the walk is single-threaded), in
// characters of text per second; tokenizing is timed apart.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "distill/xtoken/alignment_stats.h"

namespace retort::distill::xtoken {

struct AlignmentReportRequest {
  std::filesystem::path student_tokenizer, teacher_tokenizer;  // .model or tokenizer.json
  std::filesystem::path text;                                  // one text file, aligned as one document; or:
  std::string corpus;     // a corpus spec (file, folder, glob: data.corpus), split into its documents
  int64_t max_bytes = 0;  // stop after this many bytes of documents (0: all); a longer --text is cut
  bool strings = false;   // also align by strings and compare with the offsets
};

struct AlignmentReport {
  std::string student_tokenizer, teacher_tokenizer;  // "path (kind)"
  int64_t documents = 0, bytes = 0, characters = 0;
  AlignmentStats stats;  // of the offset alignment
  double tokenize_seconds = 0, align_seconds = 0;
  // The string alignment, when requested: its statistics, time, and the documents where it gave exactly the
  // offset alignment's chunks.
  bool strings = false;
  AlignmentStats string_stats;
  double string_align_seconds = 0;
  int64_t string_documents_equal = 0;
  std::optional<std::string> warning;  // low_alignment_warning of the offset alignment

  double characters_per_second() const;           // offset alignment
  double string_characters_per_second() const;    // string alignment
  double tokenize_characters_per_second() const;  // both tokenizers, one after the other
};

AlignmentReport report_alignment(const AlignmentReportRequest& request);

std::string format_alignment_report(const AlignmentReport& report);
nlohmann::json alignment_report_json(const AlignmentReport& report);

}  // namespace retort::distill::xtoken
