#include "apps/train_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>

#include "apps/config_command.h"
#include "distill/train/config_builders.h"
#include "distill/train/training_loop.h"

namespace retort::apps {

namespace {

void run(const ResolvedConfig& config, const ConfigCommandArgs& args) {
  const distill::TrainResult r = distill::run_label_training(
      config, device_from_args(args, config), distill::run_start_from_flags(args.resume, args.overwrite));
  if (!r.main_rank) return;
  spdlog::info("done: {} steps in {}; {:.0f} tokens/s", r.steps, r.run_dir.string(), r.tokens_per_second);
  if (std::isnan(r.final_eval_loss)) {
    std::cout << fmt::format(
        "\n  validation loss   none (no validation split: data.val_fraction = 0, or data.shards without "
        "data.val_shards)\n"
        "  unigram entropy   {:.4f} nats/token (the loss of a model that ignores context)\n"
        "  run directory     {}\n",
        r.unigram_entropy, r.run_dir.string());
    return;
  }
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
  add_config_verb(app,
                  {{"train"},
                   "train a GPT from a YAML config (defaults: the toy GPT on fortunes)",
                   "configs/toy-gpt.yaml",
                   [] { return distill::training_schema("runs/toy-gpt"); },
                   run,
                   /*distributed=*/true,
                   /*resumable=*/true},
                  exit_code);
}

}  // namespace retort::apps
