#include "apps/eval_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "core/tensor/device_choice.h"
#include "core/util/error.h"
#include "distill/train/evaluation.h"
#include "parallel/comm/rendezvous.h"
#include "parallel/launch/launcher.h"

namespace retort::apps {

namespace {

struct EvalArgs {
  std::string run_dir, data, teacher, device = "cpu", data_cache = "data/eval";
  int64_t batches = 0;
  int64_t step = -1;  // -1: the latest checkpoint
  int nproc = 0;      // 0: as many as tp
  int tp = 1;
  bool json = false;
};

// `retort eval ... --nproc N` is `retort launch --nproc N -- retort eval ...` with the same arguments less --nproc.
int relaunch_on_ranks(const EvalArgs& a, int nproc) {
  std::vector<std::string> argv{
      "/proc/self/exe",          "eval", "--checkpoint",       a.run_dir,      "--device",  a.device, "--batches",
      std::to_string(a.batches), "--tp", std::to_string(a.tp), "--data-cache", a.data_cache};
  if (!a.data.empty()) argv.insert(argv.end(), {"--data", a.data});
  if (!a.teacher.empty()) argv.insert(argv.end(), {"--teacher", a.teacher});
  if (a.step >= 0) argv.insert(argv.end(), {"--step", std::to_string(a.step)});
  if (a.json) argv.push_back("--json");
  LaunchOptions options;
  options.nproc = nproc;
  return launch_local(argv, options).exit_code;
}

void print_text(const distill::RunEvaluation& e) {
  const distill::EvalReport& r = e.report;
  std::cout << fmt::format(
      "\n  model            {} (step {})\n  data             {}\n  tokens           {} ({} bytes of text)\n"
      "  loss             {:.4f} nats/token\n  perplexity       {:.2f}\n",
      e.checkpoint.string(), e.step, e.data, r.tokens, r.bytes, r.loss, r.perplexity);
  if (r.bits_per_byte) std::cout << fmt::format("  bits per byte    {:.4f}\n", *r.bits_per_byte);
  if (r.kl_to_teacher)
    std::cout << fmt::format("  KL(teacher||it)  {:.4f} nats/token (teacher {})\n  top-1 agreement  {:.1f}%\n",
                             *r.kl_to_teacher, e.teacher_checkpoint.string(), 100 * *r.top1_agreement);
  if (e.tp * e.dp > 1) std::cout << fmt::format("  ranks            {} (dp {} x tp {})\n", e.tp * e.dp, e.dp, e.tp);
}

void run(const EvalArgs& args, int* exit_code) {
  const int nproc = args.nproc > 0 ? args.nproc : args.tp;
  RETORT_INPUT_CHECK(nproc % args.tp == 0,
                     "--nproc {} is not a multiple of --tp {}: the ranks form dp x tp replicas (e.g. --nproc {})",
                     nproc, args.tp, 2 * args.tp);
  // Already one rank of a launch (ours, torchrun-style, mpirun or srun): evaluate here.
  if (nproc > 1 && read_launch_env().world_size == 1) {
    *exit_code = relaunch_on_ranks(args, nproc);
    return;
  }
  distill::RunEvaluationRequest request;
  request.run_dir = args.run_dir;
  request.data = args.data;
  request.teacher_dir = args.teacher;
  request.device = usable_device(args.device, "--device");
  request.max_batches = args.batches;
  if (args.step >= 0) request.step = args.step;
  request.tp = args.tp;
  request.data_cache = args.data_cache;
  const distill::RunEvaluation e = distill::evaluate_run(request);
  if (!e.main_rank) return;
  if (args.json)
    std::cout << distill::evaluation_json(e).dump() << std::endl;
  else
    print_text(e);
}

}  // namespace

void add_eval_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "held-out loss, perplexity and bits per byte of a trained model (and agreement with a teacher)");
  cmd->add_option("--checkpoint", args->run_dir,
                  "the model's run folder (its latest checkpoint is used, or the one of --step)")
      ->required();
  cmd->add_option("--step", args->step, "score the checkpoint of this step instead of the latest")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--data", args->data,
                  "text to evaluate on: a file, folder or glob (default: the run's validation split)");
  cmd->add_option("--data-cache", args->data_cache,
                  "where --data's tokenized text is kept, by text hash and tokenizer fingerprint (reused)");
  cmd->add_option("--teacher", args->teacher, "a teacher's run folder: adds KL(teacher || model) and top-1 agreement");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N");
  cmd->add_option("--batches", args->batches, "evaluate at most this many batches (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--nproc", args->nproc,
                  "start this many local ranks (as retort launch --nproc N does); default --tp. The ranks / tp "
                  "replicas share the batches")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--tp", args->tp, "tensor-parallel degree: each model split over this many ranks")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--json", args->json, "print one JSON object on stdout (logs stay on stderr)");
  cmd->callback([args, exit_code] { run(*args, exit_code); });
}

}  // namespace retort::apps
