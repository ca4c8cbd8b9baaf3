#include "apps/export_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "distill/train/hf_export_run.h"

namespace retort::apps {

namespace {

struct ExportArgs {
  std::string run_dir, out_dir;
};

void run(const ExportArgs& args) {
  const distill::HfExportSummary s = distill::export_run_to_hf(args.run_dir, args.out_dir);
  std::cout << fmt::format("exported {} ({} model, {} tensors) to {}: config.json, model.safetensors{}\n",
                           s.checkpoint.string(), s.family, s.tensors, s.out_dir.string(),
                           s.tokenizer ? ", " + s.tokenizer->filename().string() : std::string(", no tokenizer"));
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "write a llama / qwen2 / qwen3 run as a Hugging Face checkpoint folder");
  cmd->add_option("--checkpoint", args->run_dir, "the run directory (its latest checkpoint is exported)")->required();
  cmd->add_option("--out", args->out_dir, "the folder to write (config.json, model.safetensors, the tokenizer)")
      ->required();
  cmd->callback([args] { run(*args); });
}

}  // namespace retort::apps
