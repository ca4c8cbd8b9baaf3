#pragma once
// `retort eval --checkpoint RUN_DIR [--data CORPUS] [--teacher RUN_DIR]`: held-out loss and perplexity of a
// trained model, and its KL to and top-1 agreement with a teacher.
#include <CLI/CLI.hpp>

namespace retort::apps {

void add_eval_command(CLI::App& app);

}  // namespace retort::apps
