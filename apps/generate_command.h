#pragma once
// `retort generate --checkpoint RUN_DIR (--prompt TEXT | --prompts FILE) [options]`: text from a trained model,
// sampled with a KV cache on the CPU or a GPU, over N tensor-parallel ranks with --nproc N
// (distill/train/generate_from_run.h does the work).
#include <CLI/CLI.hpp>

namespace retort::apps {

void add_generate_command(CLI::App& app, int* exit_code);

}  // namespace retort::apps
