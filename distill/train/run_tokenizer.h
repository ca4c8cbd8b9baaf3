#pragma once
// A run keeps the tokenizer it was trained with: RUN/tokenizer.model or RUN/tokenizer.json (with the
// tokenizer_config.json beside it, when its source has one), a copy of its data's tokenizer, and
// RUN/run_tokenizer.json, which records the copy's fingerprint and the vocabulary size. eval, generate and
// distillation read the run's copy, so a data folder rebuilt or deleted later cannot change what a run's ids mean.
// Runs made before this record existed have neither file and fall back to their data folder's tokenizer.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "core/data/dataset.h"

namespace retort::distill {

// The names the run's copy may take (data::copy_tokenizer_file).
inline constexpr const char* kRunTokenizerFiles[] = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json"};
inline constexpr const char* kRunTokenizerRecord = "run_tokenizer.json";

struct RunTokenizerRecord {
  std::string fingerprint;  // data::kNoTokenizerFingerprint: trained on pre-tokenized shards without a tokenizer
  int64_t vocab_size = 0;
  std::optional<std::filesystem::path> file;  // the run's copy; none without a tokenizer
  std::string source;                         // where the copy came from, for messages
};

// Copies the dataset's tokenizer into the run folder and records it (atomic writes; call on one rank). A resumed
// run must train with the tokenizer it started with: a different one is an InputError naming both.
void keep_run_tokenizer(const std::filesystem::path& run_dir, const data::PreparedDataset& dataset, bool resume);

// The run's record, or nothing for a run made before runs kept their tokenizer.
std::optional<RunTokenizerRecord> read_run_tokenizer_record(const std::filesystem::path& run_dir);

}  // namespace retort::distill
