#include "apps/eval_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "distill/train/evaluation.h"

namespace retort::apps {

namespace {

struct EvalArgs {
  std::string run_dir, data, teacher, device = "cpu";
  int64_t batches = 0;
};

void run(const EvalArgs& args) {
  const distill::RunEvaluation e =
      distill::evaluate_run({args.run_dir, args.data, args.teacher, Device::parse(args.device), args.batches});
  const distill::EvalReport& r = e.report;
  std::cout << fmt::format(
      "\n  model            {} (step {})\n  tokens           {}\n  loss             {:.4f} nats/token\n"
      "  perplexity       {:.2f}\n",
      e.checkpoint.string(), e.step, r.tokens, r.loss, r.perplexity);
  if (r.kl_to_teacher)
    std::cout << fmt::format("  KL(teacher||it)  {:.4f} nats/token (teacher {})\n  top-1 agreement  {:.1f}%\n",
                             *r.kl_to_teacher, e.teacher_checkpoint.string(), 100 * *r.top1_agreement);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd =
      app.add_subcommand("eval", "held-out loss and perplexity of a trained model (and agreement with a teacher)");
  cmd->add_option("--checkpoint", args->run_dir, "the model's run directory (its latest checkpoint is used)")
      ->required();
  cmd->add_option("--data", args->data,
                  "text to evaluate on: a file, folder or glob (default: the run's validation split)");
  cmd->add_option("--teacher", args->teacher,
                  "a teacher's run directory: adds KL(teacher || model) and top-1 agreement");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N");
  cmd->add_option("--batches", args->batches, "evaluate at most this many batches (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([args] { run(*args); });
}

}  // namespace retort::apps
