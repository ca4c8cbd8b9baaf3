#include "apps/distill_command.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>
#include <memory>

#include "apps/config_command.h"
#include "apps/distill_config.h"
#include "apps/distill_pipeline.h"
#include "apps/distill_trainer.h"
#include "core/config/config.h"
#include "core/tensor/device.h"
#include "core/util/error.h"

namespace retort::apps {

namespace {

ResolvedConfig resolve_args(const ConfigCommandArgs& args) {
  return resolve_config_args(args, distill_schema());
}

void run_train(const ConfigCommandArgs& args) {
  const ResolvedConfig config = resolve_args(args);
  const TrainResult r = run_distill_training(config, device_from_args(args, config), args.resume);
  if (!r.main_rank) return;
  std::cout << fmt::format(
      "\n  student validation loss   {:.4f} nats/token (perplexity {:.1f})\n"
      "  unigram entropy           {:.4f} nats/token\n"
      "  run directory             {}\n",
      r.final_eval_loss, std::exp(r.final_eval_loss), r.unigram_entropy, r.run_dir.string());
}

void run_topk(const ConfigCommandArgs& args) {
  const ResolvedConfig config = resolve_args(args);
  const distill::TeacherTopKReport r = write_teacher_cache(config, device_from_args(args, config));
  std::cout << fmt::format("\n  cache          {} ({} tokens, {} computed now)\n  throughput     {:.0f} tokens/s\n",
                           cache_dir(config).string(), r.cache_tokens, r.computed_tokens, r.tokens_per_second);
}

void run_pipeline(const ConfigCommandArgs& args) {
  const ResolvedConfig config = resolve_args(args);
  const DistillRunReport report = run_distillation_pipeline(config, device_from_args(args, config));
  std::cout << "\n" << format_report_table(report);
}

CLI::App* add_sub(CLI::App* parent, const std::string& name, const std::string& help,
                  const std::shared_ptr<ConfigCommandArgs>& args, bool distributed) {
  CLI::App* cmd = parent->add_subcommand(name, help);
  add_config_command_options(cmd, *args, "configs/distill-toy.yaml", distributed);
  return cmd;
}

}  // namespace

void add_distill_command(CLI::App& app, int* exit_code) {
  CLI::App* distill = app.add_subcommand("distill", "off-policy distillation from a teacher's top-k cache");
  distill->require_subcommand(1);

  auto train = std::make_shared<ConfigCommandArgs>();
  CLI::App* train_cmd =
      add_sub(distill, "train", "train a student from the top-k cache (or an online teacher)", train, true);
  train_cmd->add_flag("--resume", train->resume, "continue from the run directory's latest checkpoint");
  train_cmd->callback([train, exit_code] {
    if (train->help_config) {
      std::cout << distill_schema().describe();
    } else if (train->nproc > 1) {
      *exit_code = relaunch_on_ranks({"distill", "train"}, *train);
    } else {
      run_train(*train);
    }
  });

  auto topk = std::make_shared<ConfigCommandArgs>();
  add_sub(distill, "topk", "write the teacher's top-k cache over the training split (resumable)", topk, true)
      ->callback([topk, exit_code] {
        if (topk->help_config) {
          std::cout << distill_schema().describe();
        } else if (topk->nproc > 1) {
          *exit_code = relaunch_on_ranks({"distill", "topk"}, *topk);
        } else {
          run_topk(*topk);
        }
      });

  auto run = std::make_shared<ConfigCommandArgs>();
  add_sub(distill, "run",
          "the whole pipeline: teacher, cache, KD student and label-only student, evaluation, table and plot", run,
          false)
      ->callback([run] {
        if (run->help_config) {
          std::cout << distill_schema().describe();
        } else {
          run_pipeline(*run);
        }
      });
}

}  // namespace retort::apps
