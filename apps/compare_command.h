#pragma once
// `retort compare RUN_A RUN_B [RUN_C ...] [--key loss | --keys loss,ce,...] [--plot FILE.svg]`: the runs' metric
// curves side by side (final and best values, the validation loss at the steps all of them validated), for two runs
// how far the second's curve is from the first's step by step (a tp 4 run against tp 1, say), and every curve in
// one SVG chart. The loss of runs trained on different objectives is not compared unless asked for.
#include <CLI/CLI.hpp>

namespace retort::apps {

void add_compare_command(CLI::App& app);

}  // namespace retort::apps
