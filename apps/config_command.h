#pragma once
// What every config-driven subcommand (`retort train`, `retort distill train|topk|run`) shares: its arguments
// (a YAML file, a device, --resume / --overwrite, --help-config, --nproc and key=value overrides), their resolution
// against a schema, and the relaunch of the same command on N local ranks.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/tensor/device.h"

namespace retort::apps {

struct ConfigCommandArgs {
  std::string config_path;
  std::string device;
  bool resume = false;
  bool overwrite = false;
  bool help_config = false;
  bool print_config = false;
  int nproc = 1;
  int tp = 0;  // --tp: parallel.tp, and the rank count when --nproc is not given; 0 = not given
  std::vector<std::string> overrides;
};

// --config, --device, --help-config, --print-config and the overrides; --nproc and --tp when `distributed`.
// (--resume and --overwrite are the caller's.)
void add_config_command_options(CLI::App* cmd, ConfigCommandArgs& args, const std::string& example_config,
                                bool distributed);

// The file (or the defaults) with the overrides applied, resolved against `schema`.
ResolvedConfig resolve_config_args(const ConfigCommandArgs& args, const ConfigSchema& schema);

// --device, else run.device; a GPU this build or machine cannot use is an InputError naming the option.
Device device_from_args(const ConfigCommandArgs& args, const ResolvedConfig& config);

// Adds the subcommand `name` of `parent` (the last of `words`, the command's words after `retort`) with the config
// options (and --resume and --overwrite when `resumable`: the verb writes a run folder). Its callback prints the
// schema for --help-config, or resolves the config (so a bad config fails once, before any rank starts) and prints
// it for --print-config, relaunches itself on the requested ranks (when `distributed`), or calls `run`.
struct ConfigVerb {
  std::vector<std::string> words;  // e.g. {"distill", "train"}
  std::string help;
  std::string example_config;
  std::function<ConfigSchema()> schema;
  std::function<void(const ResolvedConfig&, const ConfigCommandArgs&)> run;
  bool distributed = true;
  bool resumable = false;
  // Every rank holds a slice of one model (no data-parallel replicas): --nproc N means --tp N.
  bool tensor_parallel_only = false;
};
CLI::App* add_config_verb(CLI::App& parent, const ConfigVerb& verb, int* exit_code);

// `retort WORDS... --nproc N ...` is `retort launch --nproc N -- retort WORDS... ...`: the same arguments, less
// --nproc. (--overwrite travels too: rank 0 alone clears the folder, before any rank writes.) Returns the launch's exit
// status.
int relaunch_on_ranks(const std::vector<std::string>& words, const ConfigCommandArgs& args);

}  // namespace retort::apps
