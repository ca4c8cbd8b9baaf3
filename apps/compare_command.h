#pragma once
// `retort compare RUN_A RUN_B [--key loss] [--plot FILE.svg]`: how far run B's metric curve is from run A's,
// step by step (a tp 4 run against tp 1, say), and both curves in one SVG chart.
#include <CLI/CLI.hpp>

namespace retort::apps {

void add_compare_command(CLI::App& app);

}  // namespace retort::apps
