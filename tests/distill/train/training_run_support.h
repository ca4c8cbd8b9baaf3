#pragma once
// The tiny training run the trainer tests share: one fortunes file, a 1-layer 32-wide GPT, 6 steps with
// validations and checkpoints every 3; the data folder is built once per test process.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "distill/train/config_builders.h"

namespace retort::distill::testing {

// A path of this test process's own under the temporary folder: ctest runs each test in its own process, two at a
// time, and a corpus one process rewrites while another reads it, or a data folder two build at once, fails both.
inline std::filesystem::path process_temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("retort_test_" + name + "_" + std::to_string(::getpid()));
}

inline std::vector<std::string> tiny_overrides(const std::filesystem::path& run_dir) {
  return {"run.dir=" + run_dir.string(),
          "data.corpus=/usr/share/games/fortunes/computers",
          "data.dir=" + process_temp_path("tiny_data").string(),
          "data.vocab_size=512",
          "model.block_size=16",
          "model.n_layer=1",
          "model.n_head=2",
          "model.n_embd=32",
          "train.batch_size=4",
          "train.seq_len=16",
          "train.steps=6",
          "train.eval_every=3",
          "train.eval_batches=2",
          "train.checkpoint_every=3",
          "optim.warmup_steps=2"};
}

inline ResolvedConfig resolve(const std::vector<std::string>& overrides) {
  Config config;
  config.apply_overrides(overrides);
  return config.resolve(training_schema());
}

inline std::vector<nlohmann::json> read_metrics(const std::filesystem::path& run_dir) {
  std::vector<nlohmann::json> records;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// Per process: ctest -j runs the tests of one fixture in parallel processes, and a shared folder would let one
// process delete or overwrite the run another is reading.
inline std::filesystem::path fresh_dir(const std::string& name) {
  std::filesystem::path dir = process_temp_path(name);
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace retort::distill::testing
