#pragma once
// The rule every command that writes a run folder follows: a folder that already holds a run's results is never
// written over silently. A new run needs a folder without results; --resume continues the run in it; --overwrite
// deletes the run's own outputs first (and nothing else a user keeps there: notes, other runs, data).
// Under several ranks rank 0 alone looks at the folder and clears it, and every rank learns its verdict, so all of
// them stop or go on together, and the clearing is over before any rank writes.
#include <filesystem>
#include <string>
#include <vector>

#include "parallel/launch/distributed_run.h"

namespace retort::distill {

enum class RunStart {
  kNew,        // the folder must hold no results
  kResume,     // continue the run in the folder (its latest checkpoint)
  kOverwrite,  // delete the run's outputs, then start anew
};

RunStart run_start_from_flags(bool resume, bool overwrite);  // both: an InputError

// The names a training run (`retort train`, `retort distill train`, the teacher and students of `distill run`)
// writes into its folder; all but config.yaml count as results.
const std::vector<std::string>& training_run_outputs();

// What marks a folder as a `distill run`'s (its teacher/ and teacher_topk/ may also serve a `distill train` whose
// run.dir holds them, so they are not among these).
const std::vector<std::string>& distill_run_results();

// The entries of `outputs` that exist in `dir`, config.yaml left out.
std::vector<std::string> results_in(const std::filesystem::path& dir, const std::vector<std::string>& outputs);

// Applies the rule to `dir`, whose run writes `outputs`; `others`: what another kind of run leaves there (a
// training run's outputs in a `distill run` folder, and the other way). kNew with results of either present is an
// InputError that names the folder, what is in it, --resume and --overwrite; kOverwrite removes `outputs` from it,
// but refuses a folder that holds another kind of run (deleting only this kind's files would mix the two). kResume
// leaves the folder as it is (whether it holds something to resume is the run's to say).
void prepare_run_folder(const std::filesystem::path& dir, RunStart start, const std::vector<std::string>& outputs,
                        const std::vector<std::string>& others);

// prepare_run_folder on rank 0, its outcome shared with every rank of `run` (collective when run has several).
void prepare_run_folder_on_ranks(const std::filesystem::path& dir, RunStart start,
                                 const std::vector<std::string>& outputs, const std::vector<std::string>& others,
                                 const DistributedRun& run);

}  // namespace retort::distill
