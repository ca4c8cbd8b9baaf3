// The `retort` command: subcommands for training, distillation, evaluation, generation, launching ranks and benchmarks.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "apps/bench_command.h"
#include "apps/compare_command.h"
#include "apps/distill_command.h"
#include "apps/eval_command.h"
#include "apps/export_command.h"
#include "apps/generate_command.h"
#include "apps/launch_command.h"
#include "apps/train_command.h"
#include "core/config/flag_hint.h"
#include "core/util/broken_pipe.h"
#include "core/util/error.h"
#include "core/util/logging.h"
#include "distill/distill_config.h"
#include "distill/train/config_builders.h"
#include "parallel/launch/rank_errors.h"
#include "retort_build_info.h"

namespace {

// `retort --version`: the version, the commit the binary was built from and whether it has the CUDA backend.
std::string version_text() {
#ifdef RETORT_WITH_CUDA
  const char* cuda = "with CUDA";
#else
  const char* cuda = "CPU only (no CUDA backend)";
#endif
  return std::string("retort ") + RETORT_VERSION + " (commit " + RETORT_GIT_COMMIT + ", " + cuda + ")";
}

// A fatal error, printed once: a launched rank hands it to `retort launch`, which prints each distinct message once
// with the ranks that raised it.
void report_error(const std::string& message, retort::RankErrorKind kind = retort::RankErrorKind::kCause) {
  if (!retort::hand_error_to_launcher(message, kind)) spdlog::error("{}", retort::rank_error_line(message));
}

// `retort train --steps 20`: the parser's complaint, and the config key the flag stands for (the config-driven
// commands only: `train` and `distill ...`).
void hint_config_keys(int argc, char** argv) {
  if (argc < 2 || (std::string(argv[1]) != "train" && std::string(argv[1]) != "distill")) return;
  const retort::ConfigSchema schema =
      std::string(argv[1]) == "train" ? retort::distill::training_schema() : retort::distill::distill_schema();
  for (int i = 1; i < argc; ++i) {
    const std::string hint = retort::config_key_hint(schema, argv[i]);
    if (!hint.empty()) std::cerr << hint << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  retort::setup_logging();
  // A lost peer rank, or a closed reader of our output, is an error to report, never a silent death by SIGPIPE.
  retort::ignore_broken_pipe_signal();
  CLI::App app{"retort: tensor-parallel training and distillation in C++ and CUDA"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  int exit_code = 0;
  retort::apps::add_train_command(app, &exit_code);
  retort::apps::add_launch_command(app, &exit_code);
  retort::apps::add_bench_command(app, &exit_code);
  retort::apps::add_distill_command(app, &exit_code);
  retort::apps::add_eval_command(app, &exit_code);
  retort::apps::add_generate_command(app, &exit_code);
  retort::apps::add_compare_command(app);
  retort::apps::add_export_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    if (code != 0) hint_config_keys(argc, argv);
    return code;
  } catch (const retort::InputError& e) {
    report_error(e.what());
    return 2;
  } catch (const retort::PeerLostError& e) {
    report_error(e.what(), retort::RankErrorKind::kLostPeer);
    return 1;
  } catch (const std::exception& e) {
    report_error(e.what());
    return 1;
  }
  return exit_code;
}
