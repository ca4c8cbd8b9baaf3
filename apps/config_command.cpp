#include "apps/config_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "core/tensor/device_choice.h"
#include "core/util/error.h"
#include "parallel/launch/launcher.h"

namespace retort::apps {

namespace {

// --nproc N starts N ranks; --tp T sets parallel.tp = T and, alone, starts T ranks (dp = N / T). A verb with
// only tensor parallelism has one meaning for both: N ranks are N tensor-parallel ranks.
void apply_rank_flags(ConfigCommandArgs& args, bool nproc_given, bool tp_only) {
  if (tp_only && nproc_given) {
    RETORT_INPUT_CHECK(args.tp == 0 || args.tp == args.nproc,
                       "--nproc {} and --tp {} disagree: this command splits the model over all its ranks (tensor "
                       "parallel only), so give one of them",
                       args.nproc, args.tp);
    args.tp = args.nproc;
  }
  if (args.tp == 0) return;
  args.overrides.push_back(fmt::format("parallel.tp={}", args.tp));
  if (!nproc_given) args.nproc = args.tp;
}

void check_rank_count(const ConfigCommandArgs& args, const ResolvedConfig& config) {
  const int64_t tp = config.get_int("parallel.tp");
  RETORT_INPUT_CHECK(args.nproc % tp == 0,
                     "--nproc {} ranks cannot hold parallel.tp = {}: the rank count must be a multiple of the "
                     "tensor-parallel degree (ranks = tp x data-parallel replicas); use --nproc {} or --tp {}",
                     args.nproc, tp, tp * std::max<int64_t>(1, args.nproc / tp), args.nproc);
}

}  // namespace

void add_config_command_options(CLI::App* cmd, ConfigCommandArgs& args, const std::string& example_config,
                                bool distributed) {
  cmd->add_option("--config", args.config_path, "YAML config file (" + example_config + ")");
  cmd->add_option("--device", args.device, "cpu, cuda or cuda:N (overrides run.device)");
  cmd->add_flag("--help-config", args.help_config, "list every config key with its default and exit");
  cmd->add_flag("--print-config", args.print_config,
                "print the resolved config (file, defaults and overrides) as YAML and exit");
  if (distributed) {
    cmd->add_option("--nproc", args.nproc, "start this many local ranks (as retort launch --nproc N does)")
        ->check(CLI::Range(1, 4096));
    cmd->add_option("--tp", args.tp,
                    "tensor-parallel degree (sets parallel.tp); without --nproc it also starts that many ranks")
        ->check(CLI::Range(1, 4096));
  }
  cmd->add_option("overrides", args.overrides, "config overrides: key.sub=value ...");
}

ResolvedConfig resolve_config_args(const ConfigCommandArgs& args, const ConfigSchema& schema) {
  Config config = args.config_path.empty() ? Config() : Config::load(args.config_path);
  config.apply_overrides(args.overrides);
  return config.resolve(schema);
}

Device device_from_args(const ConfigCommandArgs& args, const ResolvedConfig& config) {
  return args.device.empty() ? usable_device(config.get_string("run.device"), "run.device (or --device)")
                             : usable_device(args.device, "--device");
}

int relaunch_on_ranks(const std::vector<std::string>& words, const ConfigCommandArgs& args) {
  std::vector<std::string> argv{"/proc/self/exe"};
  argv.insert(argv.end(), words.begin(), words.end());
  if (!args.config_path.empty()) argv.insert(argv.end(), {"--config", args.config_path});
  if (!args.device.empty()) argv.insert(argv.end(), {"--device", args.device});
  if (args.resume) argv.push_back("--resume");
  if (args.overwrite) argv.push_back("--overwrite");
  argv.insert(argv.end(), args.overrides.begin(), args.overrides.end());
  LaunchOptions options;
  options.nproc = args.nproc;
  return launch_local(argv, options).exit_code;
}

CLI::App* add_config_verb(CLI::App& parent, const ConfigVerb& verb, int* exit_code) {
  auto args = std::make_shared<ConfigCommandArgs>();
  CLI::App* cmd = parent.add_subcommand(verb.words.back(), verb.help);
  add_config_command_options(cmd, *args, verb.example_config, verb.distributed);
  if (verb.resumable) {
    cmd->add_flag("--resume", args->resume, "continue the run in run.dir from where it stopped");
    cmd->add_flag("--overwrite", args->overwrite, "delete the run in run.dir (its own outputs only) and start again");
  }
  cmd->callback([args, verb, exit_code, cmd] {
    if (args->help_config) {
      std::cout << verb.schema().describe();
      return;
    }
    if (verb.distributed) apply_rank_flags(*args, cmd->count("--nproc") > 0, verb.tensor_parallel_only);
    const ResolvedConfig config = resolve_config_args(*args, verb.schema());
    if (args->print_config) {
      std::cout << config.to_yaml(true);
      return;
    }
    if (args->nproc > 1) {
      check_rank_count(*args, config);
      // The config was resolved here first, so a mistake in it is reported once, not once per rank.
      *exit_code = relaunch_on_ranks(verb.words, *args);
    } else {
      verb.run(config, *args);
    }
  });
  return cmd;
}

}  // namespace retort::apps
