#pragma once
// `retort distill compare`: the distillation methods side by side at an equal student budget (one teacher, one
// student run per method), printed as a table; compare.json, compare.md and compare_curves.svg in run.dir.
#include <CLI/CLI.hpp>

namespace retort::apps {

void add_distill_compare_verb(CLI::App& distill, int* exit_code);

}  // namespace retort::apps
