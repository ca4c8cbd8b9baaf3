// The `retort` command: subcommands for training, distillation, evaluation, generation, launching ranks and benchmarks.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "apps/bench_command.h"
#include "apps/compare_command.h"
#include "apps/distill_command.h"
#include "apps/eval_command.h"
#include "apps/generate_command.h"
#include "apps/launch_command.h"
#include "apps/train_command.h"
#include "core/util/broken_pipe.h"
#include "core/util/error.h"
#include "core/util/logging.h"

int main(int argc, char** argv) {
  retort::setup_logging();
  // A lost peer rank, or a closed reader of our output, is an error to report, never a silent death by SIGPIPE.
  retort::ignore_broken_pipe_signal();
  CLI::App app{"retort: tensor-parallel training and distillation in C++ and CUDA"};
  app.require_subcommand(1);
  int exit_code = 0;
  retort::apps::add_train_command(app, &exit_code);
  retort::apps::add_launch_command(app, &exit_code);
  retort::apps::add_bench_command(app, &exit_code);
  retort::apps::add_distill_command(app, &exit_code);
  retort::apps::add_eval_command(app, &exit_code);
  retort::apps::add_generate_command(app, &exit_code);
  retort::apps::add_compare_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const retort::InputError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  return exit_code;
}
