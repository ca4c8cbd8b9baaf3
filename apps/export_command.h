#pragma once
// `retort export --checkpoint RUN_DIR --out DIR`: a llama / qwen2 / qwen3 run as a Hugging Face checkpoint folder
// (config.json, model.safetensors and the run's tokenizer) that transformers loads.
#include <CLI/CLI.hpp>

namespace retort::apps {

void add_export_command(CLI::App& app);

}  // namespace retort::apps
