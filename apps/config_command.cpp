#include "apps/config_command.h"

#include <iostream>
#include <memory>

#include "core/util/error.h"
#include "parallel/launch/launcher.h"

namespace retort::apps {

void add_config_command_options(CLI::App* cmd, ConfigCommandArgs& args, const std::string& example_config,
                                bool distributed) {
  cmd->add_option("--config", args.config_path, "YAML config file (" + example_config + ")");
  cmd->add_option("--device", args.device, "cpu, cuda or cuda:N (overrides run.device)");
  cmd->add_flag("--help-config", args.help_config, "list every config key with its default and exit");
  if (distributed)
    cmd->add_option("--nproc", args.nproc, "start this many local ranks (as retort launch --nproc N does)")
        ->check(CLI::Range(1, 4096));
  cmd->add_option("overrides", args.overrides, "config overrides: key.sub=value ...");
}

ResolvedConfig resolve_config_args(const ConfigCommandArgs& args, const ConfigSchema& schema) {
  Config config = args.config_path.empty() ? Config() : Config::load(args.config_path);
  config.apply_overrides(args.overrides);
  return config.resolve(schema);
}

Device device_from_args(const ConfigCommandArgs& args, const ResolvedConfig& config) {
  const Device device = Device::parse(args.device.empty() ? config.get_string("run.device") : args.device);
  if (device.is_cuda())
    RETORT_INPUT_CHECK(device.index < cuda_device_count(), "--device {}: this machine has {} CUDA device(s)",
                       device.str(), cuda_device_count());
  return device;
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
  cmd->callback([args, verb, exit_code] {
    if (args->help_config) {
      std::cout << verb.schema().describe();
    } else if (args->nproc > 1) {
      *exit_code = relaunch_on_ranks(verb.words, *args);
    } else {
      const ResolvedConfig config = resolve_config_args(*args, verb.schema());
      verb.run(config, *args);
    }
  });
  return cmd;
}

}  // namespace retort::apps
