#pragma once
// `retort eval --checkpoint RUN_DIR [--step N] [--data CORPUS] [--teacher RUN_DIR] [--json] [--nproc N] [--tp T]`:
// held-out loss, perplexity and bits per byte of a trained model, and its KL to and top-1 agreement with a teacher.
#include <CLI/CLI.hpp>

namespace retort::apps {

// `exit_code`: the launch's status when the command relaunches itself on --nproc ranks.
void add_eval_command(CLI::App& app, int* exit_code);

}  // namespace retort::apps
