#pragma once
#include <CLI/CLI.hpp>

namespace retort::apps {

// Registers `retort train` on the command-line parser.
// exit_code: where a launch started by --nproc leaves its status.
void add_train_command(CLI::App& app, int* exit_code);

}  // namespace retort::apps
