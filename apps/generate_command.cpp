#include "apps/generate_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "core/util/error.h"
#include "distill/train/generate_from_run.h"
#include "parallel/launch/launcher.h"

namespace retort::apps {

namespace {

using distill::GenerationRequest;

// `retort generate ... --nproc N` is `retort launch --nproc N -- retort generate ...` without --nproc. Values go as
// --option=value so that a stop string or prompt starting with '-' stays a value.
int relaunch_on_ranks(const GenerationRequest& args) {
  std::vector<std::string> argv{"/proc/self/exe", "generate", "--checkpoint=" + args.run_dir};
  if (args.prompt) argv.push_back("--prompt=" + *args.prompt);
  if (args.prompts_file) argv.push_back("--prompts=" + *args.prompts_file);
  argv.push_back(fmt::format("--max-new-tokens={}", args.max_new_tokens));
  argv.push_back(fmt::format("--temperature={}", args.temperature));
  argv.push_back(fmt::format("--top-k={}", args.top_k));
  argv.push_back(fmt::format("--top-p={}", args.top_p));
  argv.push_back(fmt::format("--seed={}", args.seed));
  for (const auto& stop : args.stop) argv.push_back("--stop=" + stop);
  argv.push_back(fmt::format("--batch-size={}", args.batch_size));
  if (!args.output.empty()) argv.push_back("--output=" + args.output);
  argv.push_back("--device=" + args.device);
  if (!args.dtype.empty()) argv.push_back("--dtype=" + args.dtype);
  LaunchOptions options;
  options.nproc = args.nproc;
  return launch_local(argv, options).exit_code;
}

}  // namespace

void add_generate_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GenerationRequest>();
  auto prompt = std::make_shared<std::string>();
  auto prompts_file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("generate", "sample text from a trained model (KV cache, any tp, CPU or GPU)");
  cmd->add_option("--checkpoint", args->run_dir, "the model's run directory (its latest checkpoint is used)")
      ->required();
  CLI::Option* prompt_opt = cmd->add_option("--prompt", *prompt, "the text to continue");
  CLI::Option* prompts_opt = cmd->add_option("--prompts", *prompts_file,
                                             "a file of prompts: one per line, or JSON lines with a \"prompt\" field");
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "new tokens per prompt at most")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "sampling temperature; 0: greedy")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "sample among the k most likely tokens only (0: off)")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "sample among the most likely tokens holding this probability (1: off)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed: the same seed gives the same text")->capture_default_str();
  cmd->add_option("--stop", args->stop,
                  "stop a completion before this text (several allowed; \\n, \\t and \\\\ are understood)");
  cmd->add_option("--batch-size", args->batch_size, "prompts generated together")->capture_default_str();
  cmd->add_option("--output", args->output, "write one JSON object per prompt to this .jsonl file");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  auto tp = std::make_shared<int>(0);
  CLI::Option* nproc_opt =
      cmd->add_option("--nproc", args->nproc, "start this many local ranks; each holds a tensor-parallel slice")
          ->capture_default_str()
          ->check(CLI::Range(1, 4096));
  cmd->add_option("--tp", *tp, "tensor-parallel degree: the same as --nproc here (every rank holds a slice)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--dtype", args->dtype, "compute dtype, f32 or bf16 (default: the run's model.dtype)");
  cmd->callback([args, prompt, prompts_file, prompt_opt, prompts_opt, nproc_opt, tp, exit_code] {
    if (*tp > 0) {
      RETORT_INPUT_CHECK(nproc_opt->count() == 0 || args->nproc == *tp,
                         "--nproc {} and --tp {} disagree: generate splits the model over all its ranks, so give one "
                         "of them",
                         args->nproc, *tp);
      args->nproc = *tp;
    }
    if (prompt_opt->count() > 0) args->prompt = *prompt;
    if (prompts_opt->count() > 0) args->prompts_file = *prompts_file;
    distill::check_generation_request(*args);  // bad options fail here, not once per rank
    if (args->nproc > 1) {
      *exit_code = relaunch_on_ranks(*args);
      return;
    }
    distill::generate_from_run(*args, std::cout);
  });
}

}  // namespace retort::apps
