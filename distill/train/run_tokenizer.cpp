#include "distill/train/run_tokenizer.h"

#include <nlohmann/json.hpp>

#include "core/data/tokenizer.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::distill {

namespace fs = std::filesystem;
using nlohmann::json;

void keep_run_tokenizer(const fs::path& run_dir, const data::PreparedDataset& dataset, bool resume) {
  if (resume) {
    if (const std::optional<RunTokenizerRecord> kept = read_run_tokenizer_record(run_dir)) {
      RETORT_INPUT_CHECK(kept->fingerprint == dataset.tokenizer_fingerprint && kept->vocab_size == dataset.vocab_size,
                         "--resume: the run '{}' was trained with tokenizer {} (vocabulary {}, from '{}') but its data "
                         "now gives tokenizer {} (vocabulary {}): resume with the data.* settings the run started with "
                         "(see its config.yaml)",
                         run_dir.string(), kept->fingerprint, kept->vocab_size, kept->source,
                         dataset.tokenizer_fingerprint, dataset.vocab_size);
      return;
    }
  }
  fs::create_directories(run_dir);
  json record{
      {"tokenizer_fingerprint", dataset.tokenizer_fingerprint},
      {"vocab_size", dataset.vocab_size},
      {"source", dataset.tokenizer_path.empty() ? std::string() : fs::absolute(dataset.tokenizer_path).string()}};
  // A copy of the other kind left by an earlier run in this folder would only mislead.
  for (const char* name : kRunTokenizerFiles) fs::remove(run_dir / name);
  if (dataset.tokenizer_path.empty()) {
    record["file"] = nullptr;
  } else {
    record["file"] = data::copy_tokenizer_file(dataset.tokenizer_path, run_dir).filename().string();
  }
  write_text_atomic(run_dir / kRunTokenizerRecord, record.dump(2));
}

std::optional<RunTokenizerRecord> read_run_tokenizer_record(const fs::path& run_dir) {
  const fs::path path = run_dir / kRunTokenizerRecord;
  if (!fs::exists(path)) return std::nullopt;
  try {
    const json record = json::parse(read_file(path));
    RunTokenizerRecord out;
    out.fingerprint = record.at("tokenizer_fingerprint").get<std::string>();
    out.vocab_size = record.at("vocab_size").get<int64_t>();
    out.source = record.value("source", std::string());
    if (!record.at("file").is_null()) out.file = run_dir / record.at("file").get<std::string>();
    return out;
  } catch (const json::exception& error) {
    throw InputError(
        fmt::format("{} is damaged ({}): it records the run's tokenizer; restore it from a copy of the run",
                    path.string(), error.what()));
  }
}

}  // namespace retort::distill
