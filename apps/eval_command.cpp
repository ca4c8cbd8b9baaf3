#include "apps/eval_command.h"

#include <iostream>
#include <memory>

#include "apps/evaluation.h"
#include "apps/trained_model.h"
#include "core/util/error.h"

namespace retort::apps {

namespace fs = std::filesystem;

namespace {

struct EvalArgs {
  std::string run_dir, data, teacher, device = "cpu";
  int64_t batches = 0;
};

void run(const EvalArgs& args) {
  const Device device = Device::parse(args.device);
  const TrainedModel model = load_trained_model(args.run_dir, device);
  std::optional<TrainedModel> teacher;
  if (!args.teacher.empty()) {
    teacher = load_trained_model(args.teacher, device);
    check_same_tokenizer(*teacher, model.tokenizer_fingerprint, model.vocab_size, "teacher");
  }
  const ResolvedConfig config = load_run_config(args.run_dir);
  // The model's own validation split, or the given text tokenized with its tokenizer.
  const std::vector<fs::path> shards =
      args.data.empty()
          ? run_validation_shards(args.run_dir)
          : std::vector<fs::path>{tokenize_corpus_for(args.run_dir, args.data, fs::path(args.run_dir) / "eval_data")};
  EvalOptions options;
  options.batch_size = config.get_int("train.batch_size");
  options.seq_len = config.get_int("train.seq_len");
  options.max_batches = args.batches;
  const EvalReport r = evaluate_model(model, shards, options, teacher ? &*teacher : nullptr);
  std::cout << fmt::format(
      "\n  model            {} (step {})\n  tokens           {}\n  loss             {:.4f} nats/token\n"
      "  perplexity       {:.2f}\n",
      model.checkpoint.string(), model.step, r.tokens, r.loss, r.perplexity);
  if (teacher)
    std::cout << fmt::format("  KL(teacher||it)  {:.4f} nats/token (teacher {})\n  top-1 agreement  {:.1f}%\n",
                             *r.kl_to_teacher, teacher->checkpoint.string(), 100 * *r.top1_agreement);
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
