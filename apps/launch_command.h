#pragma once
#include <CLI/CLI.hpp>

namespace retort::apps {

// Registers `retort launch --nproc N -- <retort command or --exec program ...>`.
void add_launch_command(CLI::App& app, int* exit_code);

}  // namespace retort::apps
