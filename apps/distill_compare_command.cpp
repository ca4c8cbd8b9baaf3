#include "apps/distill_compare_command.h"

#include <iostream>

#include "apps/config_command.h"
#include "distill/compare/compare_config.h"
#include "distill/compare/distill_compare.h"

namespace retort::apps {

namespace {

void run_compare(const ResolvedConfig& config, const ConfigCommandArgs& args) {
  const distill::ComparisonReport report = distill::run_distillation_comparison(
      config, device_from_args(args, config), distill::run_start_from_flags(args.resume, args.overwrite));
  std::cout << "\n"
            << distill::comparison_markdown(report) << "\ncompare.json, compare.md and compare_curves.svg in "
            << report.run_dir.string() << "\n";
}

}  // namespace

void add_distill_compare_verb(CLI::App& distill, int* exit_code) {
  add_config_verb(distill,
                  {{"distill", "compare"},
                   "the distillation methods side by side (label-only, top-k renormalised, top-k + rest bucket, "
                   "sampled, online, on-policy): one teacher, one student per method, a table and a plot",
                   "configs/distill-compare.yaml",
                   distill::compare_schema,
                   run_compare,
                   /*distributed=*/false,
                   /*resumable=*/true},
                  exit_code);
}

}  // namespace retort::apps
