#pragma once
// `retort distill train | topk | run | align`: off-policy distillation (docs/distillation.md).
#include <CLI/CLI.hpp>

namespace retort::apps {

void add_distill_command(CLI::App& app, int* exit_code);

}  // namespace retort::apps
