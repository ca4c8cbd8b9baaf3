#include "distill/train/run_folder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <exception>

#include "core/util/error.h"

namespace retort::distill {

namespace fs = std::filesystem;

RunStart run_start_from_flags(bool resume, bool overwrite) {
  RETORT_INPUT_CHECK(!(resume && overwrite),
                     "--resume and --overwrite contradict each other: --resume continues the run in run.dir, "
                     "--overwrite deletes it and starts anew; give one");
  return resume ? RunStart::kResume : overwrite ? RunStart::kOverwrite : RunStart::kNew;
}

const std::vector<std::string>& training_run_outputs() {
  static const std::vector<std::string> names{"config.yaml",           "metrics.jsonl",      "metrics.csv",
                                              "objective.json",        "tokenizer.model",    "tokenizer.json",
                                              "tokenizer_config.json", "run_tokenizer.json", "checkpoints"};
  return names;
}

const std::vector<std::string>& distill_run_results() {
  static const std::vector<std::string> names{"results.json", "loss_curves.svg", "student_kd", "student_labels"};
  return names;
}

std::vector<std::string> results_in(const fs::path& dir, const std::vector<std::string>& outputs) {
  std::vector<std::string> found;
  for (const std::string& name : outputs)
    if (name != "config.yaml" && fs::exists(dir / name)) found.push_back(name);
  return found;
}

void prepare_run_folder(const fs::path& dir, RunStart start, const std::vector<std::string>& outputs,
                        const std::vector<std::string>& others) {
  if (start == RunStart::kResume) return;
  const std::vector<std::string> foreign = results_in(dir, others);
  RETORT_INPUT_CHECK(start != RunStart::kOverwrite || foreign.empty(),
                     "--overwrite: the folder '{}' holds another kind of run ({}), which this command does not "
                     "delete: set run.dir to another folder (or delete that run yourself)",
                     dir.string(), fmt::join(foreign, ", "));
  if (start == RunStart::kNew) {
    std::vector<std::string> found = results_in(dir, outputs);
    found.insert(found.end(), foreign.begin(), foreign.end());
    RETORT_INPUT_CHECK(found.empty(),
                       "the run folder '{}' already holds a run ({}): add --resume to continue it, --overwrite to "
                       "delete it and start again, or set run.dir to another folder",
                       dir.string(), fmt::join(found, ", "));
    return;
  }
  // Only the run's own outputs go: whatever else is in the folder was put there by someone else.
  for (const std::string& name : outputs) fs::remove_all(dir / name);
}

void prepare_run_folder_on_ranks(const fs::path& dir, RunStart start, const std::vector<std::string>& outputs,
                                 const std::vector<std::string>& others, const DistributedRun& run) {
  std::exception_ptr refusal;
  if (run.is_main()) {
    try {
      prepare_run_folder(dir, start, outputs, others);
    } catch (...) {
      refusal = std::current_exception();
    }
  }
  if (run.host_world) {
    // Also the barrier that keeps the other ranks from writing before rank 0 has cleared the folder.
    Tensor refused = Tensor::scalar(refusal ? 1.0 : 0.0, DType::F64, Device::cpu());
    run.host_world->all_reduce(refused, ReduceOp::Max);
    if (refused.item() != 0 && !refusal)
      throw InputError(fmt::format("rank 0 refused the run folder '{}' (its error says why)", dir.string()));
  }
  if (refusal) std::rethrow_exception(refusal);
}

}  // namespace retort::distill
