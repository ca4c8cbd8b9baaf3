#include "apps/distill_command.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "apps/config_command.h"
#include "apps/distill_align_command.h"
#include "apps/distill_compare_command.h"
#include "distill/cache/teacher_cache_writer.h"
#include "distill/distill_config.h"
#include "distill/distill_training.h"
#include "distill/pipeline/distill_pipeline.h"

namespace retort::apps {

namespace {

void run_train(const ResolvedConfig& config, const ConfigCommandArgs& args) {
  const distill::TrainResult r = distill::run_distill_training(
      config, device_from_args(args, config), distill::run_start_from_flags(args.resume, args.overwrite));
  if (!r.main_rank) return;
  const std::string validation =
      std::isnan(r.final_eval_loss)
          ? std::string("none (no validation split: data.val_fraction = 0, or data.shards without data.val_shards)")
          : fmt::format("{:.4f} nats/token (perplexity {:.1f})", r.final_eval_loss, std::exp(r.final_eval_loss));
  std::cout << fmt::format(
      "\n  student validation loss   {}\n"
      "  unigram entropy           {:.4f} nats/token\n"
      "  run directory             {}\n",
      validation, r.unigram_entropy, r.run_dir.string());
}

void run_topk(const ResolvedConfig& config, const ConfigCommandArgs& args) {
  const distill::TeacherTopKReport r = distill::write_teacher_cache(config, device_from_args(args, config));
  std::cout << fmt::format("\n  cache          {} ({} tokens, {} computed now)\n  throughput     {:.0f} tokens/s\n",
                           distill::cache_dir(config).string(), r.cache_tokens, r.computed_tokens, r.tokens_per_second);
}

void run_pipeline(const ResolvedConfig& config, const ConfigCommandArgs& args) {
  const distill::DistillRunReport report = distill::run_distillation_pipeline(
      config, device_from_args(args, config), distill::run_start_from_flags(args.resume, args.overwrite));
  if (report.main_rank) std::cout << "\n" << distill::format_report_table(report);
}

}  // namespace

void add_distill_command(CLI::App& app, int* exit_code) {
  CLI::App* distill = app.add_subcommand("distill", "off-policy distillation from a teacher's top-k cache");
  distill->require_subcommand(1);
  const std::string example = "configs/distill-toy.yaml";
  // Each verb's run.dir default is its own folder, so one command never writes into another's run.
  const auto student_schema = [] { return distill::distill_schema(distill::kDistillTrainRunDir); };
  const auto pipeline_schema = [] { return distill::distill_schema(distill::kDistillRunDir); };
  add_config_verb(*distill,
                  {{"distill", "train"},
                   "train a student from the top-k cache (or an online teacher)",
                   example,
                   student_schema,
                   run_train,
                   /*distributed=*/true,
                   /*resumable=*/true},
                  exit_code);
  add_config_verb(*distill,
                  {{"distill", "topk"},
                   "write the teacher's top-k cache over the training split (resumable)",
                   example,
                   pipeline_schema,
                   run_topk,
                   /*distributed=*/true,
                   /*resumable=*/false,
                   /*tensor_parallel_only=*/true},
                  exit_code);
  add_config_verb(*distill,
                  {{"distill", "run"},
                   "the whole pipeline: teacher, cache, KD student and label-only student, evaluation, table and plot",
                   example,
                   pipeline_schema,
                   run_pipeline,
                   /*distributed=*/true,
                   /*resumable=*/true},
                  exit_code);
  add_distill_compare_verb(*distill, exit_code);
  add_distill_align_verb(*distill);
}

}  // namespace retort::apps
