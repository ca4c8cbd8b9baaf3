#include "apps/launch_command.h"

#include <memory>

#include "parallel/launch/launcher.h"

namespace retort::apps {

void add_launch_command(CLI::App& app, int* exit_code) {
  struct Args {
    LaunchOptions options;
    bool exec = false;
    std::vector<std::string> command;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("launch", "start N local ranks of a retort command (like torchrun)");
  cmd->add_option("--nproc", args->options.nproc, "ranks to start on this machine (one GPU each)")->required();
  cmd->add_option("--rendezvous", args->options.rendezvous,
                  "a folder every rank can see, or redis://HOST:PORT/PREFIX (default on one node: a fresh temporary "
                  "folder); new for every run");
  cmd->add_option("--nnodes", args->options.nnodes, "nodes taking part, each running its own retort launch")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--node-rank", args->options.node_rank, "this node's index, 0 .. nnodes - 1")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--exec", args->exec, "run a program instead of a retort subcommand (implied by a path with a /)");
  cmd->add_option("command", args->command, "after --: the retort subcommand and its arguments")->required();
  cmd->callback([args, exit_code] {
    std::vector<std::string> argv = args->command;
    // A retort subcommand runs this very binary, so ranks use the same build as the launcher. A path (it has a
    // '/') is a program, as with --exec.
    const bool program = args->exec || argv.front().find('/') != std::string::npos;
    if (!program) argv.insert(argv.begin(), "/proc/self/exe");
    *exit_code = launch_local(argv, args->options).exit_code;
  });
}

}  // namespace retort::apps
