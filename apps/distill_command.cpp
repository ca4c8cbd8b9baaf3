#include "apps/distill_command.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>
#include <memory>

#include "apps/distill_config.h"
#include "apps/distill_pipeline.h"
#include "apps/distill_trainer.h"
#include "apps/launcher.h"
#include "core/config/config.h"
#include "core/tensor/device.h"
#include "core/util/error.h"

namespace retort::apps {

namespace {

struct DistillArgs {
  std::string config_path;
  std::string device;
  bool resume = false;
  bool help_config = false;
  int nproc = 1;
  std::vector<std::string> overrides;
};

ResolvedConfig resolve_args(const DistillArgs& args) {
  Config config = args.config_path.empty() ? Config() : Config::load(args.config_path);
  config.apply_overrides(args.overrides);
  return config.resolve(distill_schema());
}

Device device_of(const DistillArgs& args, const ResolvedConfig& config) {
  const Device device = Device::parse(args.device.empty() ? config.get_string("run.device") : args.device);
  if (device.is_cuda())
    RETORT_INPUT_CHECK(device.index < cuda_device_count(), "--device {}: this machine has {} CUDA device(s)",
                       device.str(), cuda_device_count());
  return device;
}

// `retort distill X --nproc N ...` is `retort launch --nproc N -- retort distill X ...`.
int relaunch(const std::string& sub, const DistillArgs& args) {
  std::vector<std::string> argv{"/proc/self/exe", "distill", sub};
  if (!args.config_path.empty()) argv.insert(argv.end(), {"--config", args.config_path});
  if (!args.device.empty()) argv.insert(argv.end(), {"--device", args.device});
  if (args.resume) argv.push_back("--resume");
  argv.insert(argv.end(), args.overrides.begin(), args.overrides.end());
  LaunchOptions options;
  options.nproc = args.nproc;
  return launch_local(argv, options).exit_code;
}

void run_train(const DistillArgs& args) {
  const ResolvedConfig config = resolve_args(args);
  const TrainResult r = run_distill_training(config, device_of(args, config), args.resume);
  if (!r.main_rank) return;
  std::cout << fmt::format(
      "\n  student validation loss   {:.4f} nats/token (perplexity {:.1f})\n"
      "  unigram entropy           {:.4f} nats/token\n"
      "  run directory             {}\n",
      r.final_eval_loss, std::exp(r.final_eval_loss), r.unigram_entropy, r.run_dir.string());
}

void run_topk(const DistillArgs& args) {
  const ResolvedConfig config = resolve_args(args);
  const distill::TeacherTopKReport r = write_teacher_cache(config, device_of(args, config));
  std::cout << fmt::format("\n  cache          {} ({} tokens, {} computed now)\n  throughput     {:.0f} tokens/s\n",
                           cache_dir(config).string(), r.cache_tokens, r.computed_tokens, r.tokens_per_second);
}

void run_pipeline(const DistillArgs& args) {
  const ResolvedConfig config = resolve_args(args);
  const DistillRunReport report = run_distillation_pipeline(config, device_of(args, config));
  std::cout << "\n" << format_report_table(report);
}

CLI::App* add_sub(CLI::App* parent, const std::string& name, const std::string& help,
                  const std::shared_ptr<DistillArgs>& args, bool distributed) {
  CLI::App* cmd = parent->add_subcommand(name, help);
  cmd->add_option("--config", args->config_path, "YAML config file (configs/distill-toy.yaml)");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N (overrides run.device)");
  cmd->add_flag("--help-config", args->help_config, "list every config key with its default and exit");
  if (distributed)
    cmd->add_option("--nproc", args->nproc, "start this many local ranks (as retort launch --nproc N does)")
        ->check(CLI::Range(1, 4096));
  cmd->add_option("overrides", args->overrides, "config overrides: key.sub=value ...");
  return cmd;
}

}  // namespace

void add_distill_command(CLI::App& app, int* exit_code) {
  CLI::App* distill = app.add_subcommand("distill", "off-policy distillation from a teacher's top-k cache");
  distill->require_subcommand(1);

  auto train = std::make_shared<DistillArgs>();
  CLI::App* train_cmd =
      add_sub(distill, "train", "train a student from the top-k cache (or an online teacher)", train, true);
  train_cmd->add_flag("--resume", train->resume, "continue from the run directory's latest checkpoint");
  train_cmd->callback([train, exit_code] {
    if (train->help_config) {
      std::cout << distill_schema().describe();
    } else if (train->nproc > 1) {
      *exit_code = relaunch("train", *train);
    } else {
      run_train(*train);
    }
  });

  auto topk = std::make_shared<DistillArgs>();
  add_sub(distill, "topk", "write the teacher's top-k cache over the training split (resumable)", topk, true)
      ->callback([topk, exit_code] {
        if (topk->help_config) {
          std::cout << distill_schema().describe();
        } else if (topk->nproc > 1) {
          *exit_code = relaunch("topk", *topk);
        } else {
          run_topk(*topk);
        }
      });

  auto run = std::make_shared<DistillArgs>();
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
