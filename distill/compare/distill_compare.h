#pragma once
// `retort distill compare`: the distillation methods side by side at an equal student budget. From one config it
// trains (or reuses) ONE teacher, then runs each method of distill.compare.methods as its own student run in
// run.dir/<method> (the same student shape, data, seed, steps and optimizer; only the teacher signal differs), scores
// every student on the held-out split against that teacher, and writes compare.json, compare.md and
// compare_curves.svg into run.dir.
//
// run.dir/
//   config.yaml          the resolved config of the comparison
//   teacher/             the shared teacher's run, unless distill.teacher names one
//   <method>/            per method: cache/ (the teacher cache it wrote, if it reads one), student/ (its run) and
//                        method.json (its figures, written last: the mark that the method is finished)
//   compare.json, compare.md, compare_curves.svg
//
// The folder follows run_folder.h: a new comparison refuses a folder that holds one; kResume keeps every method
// whose method.json is intact and of the same config, and runs the others again from scratch (a method that
// stopped part way is cleared first, so its wall time is that of one whole run); kOverwrite deletes the
// comparison's outputs first. A method whose keys this build does not know is reported as not available.
// One process (the students' parallel keys apply inside each stage as in `distill train`).
#include "core/config/resolved_config.h"
#include "core/tensor/device.h"
#include "distill/compare/comparison_report.h"
#include "distill/train/run_folder.h"

namespace retort::distill {

// `config`: resolved with compare_schema().
ComparisonReport run_distillation_comparison(const ResolvedConfig& config, Device device,
                                             RunStart start = RunStart::kNew);

}  // namespace retort::distill
