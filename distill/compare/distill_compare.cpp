#include "distill/compare/distill_compare.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "core/config/config.h"
#include "core/data/dataset.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "core/util/human_format.h"
#include "distill/compare/compare_config.h"
#include "distill/compare/compare_methods.h"
#include "distill/compare/method_run.h"
#include "distill/distill_config.h"
#include "distill/pipeline/teacher_reuse.h"
#include "distill/pipeline/teacher_stage.h"
#include "distill/train/checkpoint.h"
#include "distill/train/config_builders.h"
#include "distill/train/token_bytes.h"
#include "parallel/launch/distributed_run.h"
#include "parallel/models/hf_config.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

// Everything the comparison writes into run.dir (the folder rule's outputs): every method's folder, selected or not,
// so that --overwrite leaves no row of an earlier selection behind.
std::vector<std::string> comparison_outputs(const ResolvedConfig& base) {
  std::vector<std::string> names{"config.yaml", "compare.json", "compare.md", "compare_curves.svg"};
  if (!has_external_teacher(base)) names.push_back("teacher");
  for (const CompareMethod& method : compare_methods()) names.push_back(method.name);
  return names;
}

std::vector<std::string> other_run_outputs() {
  std::vector<std::string> names = training_run_outputs();
  names.insert(names.end(), distill_run_results().begin(), distill_run_results().end());
  return names;
}

}  // namespace

ComparisonReport run_distillation_comparison(const ResolvedConfig& config, Device device, RunStart start) {
  const auto run_start = std::chrono::steady_clock::now();
  const ResolvedConfig base = comparison_base_config(config);
  ComparisonReport report;
  report.run_dir = config.get_string("run.dir");
  report.teacher_dir = teacher_run_dir(base);
  report.student_steps = base.get_int("train.steps");
  const DistributedRun dist =
      start_distributed_run(device, static_cast<int>(base.get_int("parallel.tp")), comm_timeout_from(base));
  RETORT_INPUT_CHECK(dist.env.world_size == 1,
                     "distill compare runs on one process (got {} ranks): start it without --nproc / a launcher",
                     dist.env.world_size);

  // The folder rule and the teacher's identity, before any work.
  const std::vector<std::string> outputs = comparison_outputs(base);
  if (start == RunStart::kResume)
    RETORT_INPUT_CHECK(!results_in(report.run_dir, outputs).empty(),
                       "--resume: '{}' holds no distill comparison yet, so there is nothing to continue: run without "
                       "--resume to start it",
                       report.run_dir.string());
  if (has_external_teacher(base)) {
    RETORT_INPUT_CHECK(latest_checkpoint(report.teacher_dir).has_value() || is_hf_checkpoint_folder(report.teacher_dir),
                       "distill.teacher = '{}' holds no trained teacher (no checkpoint, and not a Hugging Face folder "
                       "with config.json and model.safetensors): train it first, or leave distill.teacher empty so "
                       "that distill compare trains one in run.dir/teacher",
                       report.teacher_dir.string());
  } else if (start == RunStart::kResume) {
    check_teacher_matches(report.teacher_dir, teacher_config_of(base, report.teacher_dir));
  }
  prepare_run_folder(report.run_dir, start, outputs, other_run_outputs());
  fs::create_directories(report.run_dir);
  write_text_atomic(report.run_dir / "config.yaml", config.to_yaml(true));

  // 1. The one teacher every method learns from.
  if (has_external_teacher(base)) {
    spdlog::info("distill compare: using the teacher in {}", report.teacher_dir.string());
  } else {
    const TeacherStageOutcome teacher_stage =
        train_or_reuse_teacher(teacher_config_of(base, report.teacher_dir), device, "distill compare");
    report.teacher_trained = teacher_stage.trained;
    report.teacher_seconds = teacher_stage.seconds;
  }
  const TrainedModel teacher = load_trained_model(report.teacher_dir, dist.device);
  MethodEvaluation evaluation;
  evaluation.teacher = &teacher;
  evaluation.device = dist.device;
  evaluation.val_shards = data::prepare_token_dataset(dataset_options_from(base)).val_shards;
  RETORT_INPUT_CHECK(!evaluation.val_shards.empty(),
                     "distill compare scores every method on held-out text: set data.val_fraction above 0");
  evaluation.token_bytes = utf8_bytes_per_token(load_run_tokenizer(teacher));
  evaluation.options.batch_size = base.get_int("train.batch_size");
  evaluation.options.seq_len = base.get_int("train.seq_len");
  report.teacher = evaluate_model(teacher, evaluation.val_shards, evaluation.options, nullptr, &evaluation.token_bytes);

  // 2. Each method as its own student run, in the table's order; finished ones are kept.
  const std::vector<CompareMethod> methods = selected_methods(config);
  for (size_t i = 0; i < methods.size(); ++i) {
    const CompareMethod& method = methods[i];
    const fs::path method_dir = report.run_dir / method.name;
    const std::string progress = fmt::format("distill compare [{}/{}] {}", i + 1, methods.size(), method.title);
    const MethodConfig method_config = method_config_of(method, base, method_dir, report.teacher_dir);
    if (!method_config.config) {
      spdlog::warn("{}: not available in this build ({})", progress, method_config.error);
      MethodResult unavailable;
      unavailable.name = method.name;
      unavailable.title = method.title;
      unavailable.overrides = method.overrides;
      unavailable.available = false;
      unavailable.unavailable_reason = method_config.error;
      report.methods.push_back(unavailable);
      continue;
    }
    const std::string fingerprint = method_fingerprint(*method_config.config, report.teacher_dir);
    if (std::optional<MethodResult> finished = read_finished_method(method_dir, fingerprint)) {
      spdlog::info("{}: finished by an earlier run (held-out loss {:.4f})", progress, finished->eval.loss);
      report.methods.push_back(*finished);
      continue;
    }
    if (fs::exists(method_dir)) {
      spdlog::info("{}: {} holds an unfinished attempt (or one of another config); running it again", progress,
                   method_dir.string());
      fs::remove_all(method_dir);
    }
    spdlog::info(
        "{}: running ({})", progress,
        method.overrides.empty() ? std::string("labels only") : fmt::format("{}", fmt::join(method.overrides, " ")));
    const MethodResult result =
        run_compare_method(method, *method_config.config, fingerprint, method_dir, device, evaluation);
    spdlog::info("{}: held-out loss {:.4f}, KL {:.4f}, top-1 {:.1f}%, cache {:.1f} bytes/token, {}", progress,
                 result.eval.loss, result.eval.kl_to_teacher.value_or(0), 100 * result.eval.top1_agreement.value_or(0),
                 result.cache_bytes_per_token, format_duration(result.wall_seconds()));
    report.methods.push_back(result);
  }

  report.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  write_comparison_outputs(report);
  return report;
}

}  // namespace retort::distill
