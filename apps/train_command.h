#pragma once
#include <CLI/CLI.hpp>

namespace retort::apps {

// Registers `retort train` on the command-line parser.
void add_train_command(CLI::App& app);

}  // namespace retort::apps
