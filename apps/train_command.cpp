#include "apps/train_command.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>
#include <memory>

#include "apps/config_command.h"
#include "apps/train_config.h"
#include "apps/trainer.h"
#include "core/config/config.h"
#include "core/tensor/device.h"
#include "core/util/error.h"

namespace retort::apps {

namespace {

void run(const ConfigCommandArgs& args) {
  const ConfigSchema schema = training_schema();
  if (args.help_config) {
    std::cout << schema.describe();
    return;
  }
  const ResolvedConfig resolved = resolve_config_args(args, schema);
  const Device device = device_from_args(args, resolved);

  const TrainResult r = run_training(resolved, device, args.resume);
  if (!r.main_rank) return;
  spdlog::info("done: {} steps in {}; {:.0f} tokens/s", r.steps, r.run_dir.string(), r.tokens_per_second);
  std::cout << fmt::format(
      "\n  validation loss   {:.4f} nats/token (perplexity {:.1f})\n"
      "  unigram entropy   {:.4f} nats/token (the loss of a model that ignores context)\n"
      "  gain              {:.4f} nats/token below the unigram baseline\n"
      "  run directory     {}\n",
      r.final_eval_loss, std::exp(r.final_eval_loss), r.unigram_entropy, r.unigram_entropy - r.final_eval_loss,
      r.run_dir.string());
}

}  // namespace

void add_train_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ConfigCommandArgs>();
  CLI::App* cmd = app.add_subcommand("train", "train a GPT from a YAML config (defaults: the toy GPT on fortunes)");
  add_config_command_options(cmd, *args, "configs/toy-gpt.yaml", /*distributed=*/true);
  cmd->add_flag("--resume", args->resume, "continue from the run directory's latest checkpoint");
  cmd->callback([args, exit_code] {
    if (args->nproc > 1 && !args->help_config) {
      *exit_code = relaunch_on_ranks({"train"}, *args);
      return;
    }
    run(*args);
  });
}

}  // namespace retort::apps
