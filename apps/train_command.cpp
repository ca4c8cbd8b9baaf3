#include "apps/train_command.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>
#include <memory>

#include "apps/launcher.h"
#include "apps/train_config.h"
#include "apps/trainer.h"
#include "core/config/config.h"
#include "core/tensor/device.h"
#include "core/util/error.h"

namespace retort::apps {

namespace {

struct TrainArgs {
  std::string config_path;
  std::string device;
  bool resume = false;
  bool help_config = false;
  int nproc = 1;
  std::vector<std::string> overrides;
};

// `retort train --nproc N ...` is `retort launch --nproc N -- retort train ...`: the same arguments, less --nproc.
int relaunch(const TrainArgs& args) {
  std::vector<std::string> argv{"/proc/self/exe", "train"};
  if (!args.config_path.empty()) argv.insert(argv.end(), {"--config", args.config_path});
  if (!args.device.empty()) argv.insert(argv.end(), {"--device", args.device});
  if (args.resume) argv.push_back("--resume");
  argv.insert(argv.end(), args.overrides.begin(), args.overrides.end());
  LaunchOptions options;
  options.nproc = args.nproc;
  return launch_local(argv, options).exit_code;
}

void run(const TrainArgs& args) {
  const ConfigSchema schema = training_schema();
  if (args.help_config) {
    std::cout << schema.describe();
    return;
  }
  Config config = args.config_path.empty() ? Config() : Config::load(args.config_path);
  config.apply_overrides(args.overrides);
  const ResolvedConfig resolved = config.resolve(schema);
  const Device device = Device::parse(args.device.empty() ? resolved.get_string("run.device") : args.device);
  if (device.is_cuda())
    RETORT_INPUT_CHECK(device.index < cuda_device_count(), "--device {}: this machine has {} CUDA device(s)",
                       device.str(), cuda_device_count());

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
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "train a GPT from a YAML config (defaults: the toy GPT on fortunes)");
  cmd->add_option("--config", args->config_path, "YAML config file (configs/toy-gpt.yaml)");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N (overrides run.device)");
  cmd->add_flag("--resume", args->resume, "continue from the run directory's latest checkpoint");
  cmd->add_flag("--help-config", args->help_config, "list every config key with its default and exit");
  cmd->add_option("--nproc", args->nproc, "start this many local ranks (as retort launch --nproc N does)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("overrides", args->overrides, "config overrides: key.sub=value ...");
  cmd->callback([args, exit_code] {
    if (args->nproc > 1 && !args->help_config) {
      *exit_code = relaunch(*args);
      return;
    }
    run(*args);
  });
}

}  // namespace retort::apps
