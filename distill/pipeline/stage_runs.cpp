#include "distill/pipeline/stage_runs.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/io/atomic_file.h"
#include "distill/distill_config.h"
#include "distill/train/checkpoint.h"

namespace retort::distill {

namespace fs = std::filesystem;

ResolvedConfig derived_config(const ResolvedConfig& config, const std::vector<std::string>& overrides) {
  Config copy = Config::from_string(config.to_yaml(), "<distill run>");
  copy.apply_overrides(overrides);
  return copy.resolve(distill_schema());
}

int64_t finished_steps(const fs::path& run_dir) {
  const auto latest = latest_checkpoint(run_dir);
  if (!latest) return 0;
  return nlohmann::json::parse(read_file(*latest / "trainer.json")).value("step", int64_t{0});
}

RunStart stage_start(const fs::path& run_dir) {
  if (finished_steps(run_dir) > 0) return RunStart::kResume;
  return results_in(run_dir, training_run_outputs()).empty() ? RunStart::kNew : RunStart::kOverwrite;
}

std::vector<std::pair<double, double>> metric_curve(const fs::path& run_dir, const std::string& key) {
  std::vector<std::pair<double, double>> curve;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains(key)) curve.emplace_back(record.at("step").get<double>(), record.at(key).get<double>());
  }
  return curve;
}

}  // namespace retort::distill
