#include "distill/pipeline/distill_pipeline.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "core/util/human_format.h"
#include "distill/cache/cache_targets.h"
#include "distill/cache/teacher_cache_writer.h"
#include "distill/distill_config.h"
#include "distill/distill_training.h"
#include "distill/pipeline/stage_runs.h"
#include "distill/pipeline/teacher_reuse.h"
#include "distill/pipeline/teacher_stage.h"
#include "distill/pipeline/xtoken_stage.h"
#include "distill/report/loss_plot.h"
#include "distill/train/checkpoint.h"
#include "distill/train/config_builders.h"
#include "distill/train/token_bytes.h"
#include "distill/train/training_loop.h"
#include "parallel/launch/distributed_run.h"
#include "parallel/models/hf_config.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::json eval_json(const EvalReport& e) {
  nlohmann::json j{{"loss", e.loss}, {"perplexity", e.perplexity}, {"tokens", e.tokens}};
  if (e.kl_to_teacher) j["kl_to_teacher"] = *e.kl_to_teacher;
  if (e.top1_agreement) j["top1_agreement"] = *e.top1_agreement;
  if (e.bits_per_byte) {
    j["bits_per_byte"] = *e.bits_per_byte;
    j["bytes"] = e.bytes;
  }
  return j;
}

StudentOutcome train_student(const std::string& name, const ResolvedConfig& config, Device device, bool distill) {
  StudentOutcome outcome;
  outcome.name = name;
  outcome.run_dir = config.get_string("run.dir");
  const int64_t steps = config.get_int("train.steps"), done = finished_steps(outcome.run_dir);
  if (done >= steps) {
    spdlog::info("distill run: the {} student in {} is trained ({} steps)", name, outcome.run_dir.string(), done);
  } else {
    spdlog::info("distill run: training the {} student in {}{}", name, outcome.run_dir.string(),
                 done > 0 ? fmt::format(" (resuming at step {})", done) : std::string());
    const RunStart start = stage_start(outcome.run_dir);
    const auto clock = std::chrono::steady_clock::now();
    if (distill)
      run_distill_training(config, device, start);
    else
      run_label_training(config, device, start);
    outcome.train_seconds = seconds_since(clock);
  }
  // The KD student logs the labels' cross-entropy as "ce"; the label-only student's loss is that cross-entropy.
  outcome.train_ce = metric_curve(outcome.run_dir, distill ? "ce" : "loss");
  outcome.eval_loss = metric_curve(outcome.run_dir, "eval_loss");
  return outcome;
}

// Whether the students learn from a top-k cache at all: not with an online teacher, nor when every step is
// on-policy (distill.on_policy_ratio = 1: the teacher scores the student's own tokens in the step).
bool reads_cache(const ResolvedConfig& config) {
  return distill_mode_from(config) == DistillMode::kCache && config.get_double("distill.on_policy_ratio") < 1;
}

bool owns_cache(const ResolvedConfig& config) {
  return cache_dir(config).lexically_normal() == default_cache_dir(config).lexically_normal();
}

// Before any work: the folder rule, the ranks a cache can be written on, an external teacher that exists, and a
// teacher of the pipeline's own that matches the config.
void check_before_work(const ResolvedConfig& config, RunStart start, const DistributedRun& dist) {
  const fs::path run_dir = config.get_string("run.dir");
  if (start == RunStart::kResume)
    RETORT_INPUT_CHECK(!results_in(run_dir, pipeline_run_outputs(config)).empty(),
                       "--resume: '{}' holds no distill run yet, so there is nothing to continue: run without "
                       "--resume to start it",
                       run_dir.string());
  if (reads_cache(config) || cross_tokenizer(config))
    RETORT_INPUT_CHECK(dist.grid.dp_size == 1,
                       "distill run writes its top-k cache on one tensor-parallel group, so in cache mode it runs "
                       "exactly parallel.tp ranks (got {} ranks for parallel.tp = {}): set parallel.tp={} or "
                       "distill.mode=online (which trains data-parallel)",
                       dist.env.world_size, dist.grid.tp_size, dist.env.world_size);
  const fs::path teacher_dir = teacher_run_dir(config);
  if (has_external_teacher(config)) {
    RETORT_INPUT_CHECK(latest_checkpoint(teacher_dir).has_value() || is_hf_checkpoint_folder(teacher_dir),
                       "distill.teacher = '{}' holds no trained teacher (no checkpoint, and not a Hugging Face folder "
                       "with config.json and model.safetensors): train it first, or leave distill.teacher empty so "
                       "that distill run trains one in run.dir/teacher",
                       teacher_dir.string());
  } else if (start == RunStart::kResume && !cross_tokenizer(config)) {
    // (cross-tokenizer: checked once the teacher's data is known, in the teacher stage)
    check_teacher_matches(teacher_dir, teacher_config_of(config, teacher_dir));
  }
}

bool owns_xtoken_dir(const ResolvedConfig& config) {
  return xtoken_dir(config).lexically_normal() ==
         (fs::path(config.get_string("run.dir")) / "xtoken").lexically_normal();
}

}  // namespace

std::vector<std::string> pipeline_run_outputs(const ResolvedConfig& config) {
  std::vector<std::string> names{"config.yaml", "results.json", "loss_curves.svg", "student_kd", "student_labels"};
  if (!has_external_teacher(config)) names.push_back("teacher");
  if (owns_cache(config) && reads_cache(config)) names.push_back(default_cache_dir(config).filename().string());
  if (cross_tokenizer(config) && owns_xtoken_dir(config)) names.push_back("xtoken");
  return names;
}

DistillRunReport run_distillation_pipeline(const ResolvedConfig& config, Device device, RunStart start) {
  const auto run_start = std::chrono::steady_clock::now();
  const DistributedRun dist =
      start_distributed_run(device, static_cast<int>(config.get_int("parallel.tp")), comm_timeout_from(config));
  const bool main = dist.is_main();
  if (!main) spdlog::set_level(spdlog::level::warn);
  DistillRunReport report;
  report.main_rank = main;
  report.run_dir = config.get_string("run.dir");
  report.teacher_dir = teacher_run_dir(config);
  // Every path of the stages follows from run.dir unless the config names it.
  const fs::path cache = cache_dir(config);
  const bool xtoken = cross_tokenizer(config);
  report.cross_tokenizer = xtoken;
  std::vector<std::string> stage_paths{"distill.teacher=" + report.teacher_dir.string(),
                                       "distill.cache_dir=" + cache.string()};
  if (xtoken) stage_paths.push_back("distill.xtoken.dir=" + xtoken_dir(config).string());
  std::vector<std::string> cache_overrides = stage_paths;
  cache_overrides.push_back("run.dir=" + report.run_dir.string());
  const ResolvedConfig pipeline_config = derived_config(config, cache_overrides);

  check_before_work(config, start, dist);
  prepare_run_folder_on_ranks(report.run_dir, start, pipeline_run_outputs(config), training_run_outputs(), dist);
  if (main) {
    fs::create_directories(report.run_dir);
    write_text_atomic(report.run_dir / "config.yaml", config.to_yaml(true));
  }

  // 0. Cross-tokenizer: the students' data, the teacher's tokenizer and the teacher's tokens of the same text.
  std::optional<XtokenData> xdata;
  std::vector<std::string> teacher_data;
  if (xtoken) {
    xdata = prepare_xtoken_data(config, has_external_teacher(config) ? report.teacher_dir : fs::path(), dist);
    teacher_data = xtoken_teacher_data_overrides(*xdata, config);
  }

  // 1. The teacher, unless the config names one.
  if (has_external_teacher(config)) {
    spdlog::info("distill run: using the teacher in {}", report.teacher_dir.string());
  } else {
    const ResolvedConfig teacher_config = teacher_config_of(config, report.teacher_dir, teacher_data);
    if (xtoken && start == RunStart::kResume) check_teacher_matches(report.teacher_dir, teacher_config, true);
    const TeacherStageOutcome teacher_stage = train_or_reuse_teacher(teacher_config, device, "distill run");
    report.teacher_seconds = teacher_stage.seconds;
    report.teacher_trained = teacher_stage.trained;
  }
  // What the cache was made from: the teacher's latest checkpoint, or a Hugging Face folder as it is.
  const fs::path teacher_checkpoint = latest_checkpoint(report.teacher_dir).value_or(report.teacher_dir);

  // 2. The top-k cache over the training split (resumed where it stopped; none in online mode).
  const bool no_cache = !reads_cache(config);  // the teacher runs in the student's steps
  const bool on_policy = config.get_double("distill.on_policy_ratio") > 0;
  if (!no_cache) {
    if (main && fs::exists(cache / kCacheInfoFile)) {
      const std::string cached_from = read_cache_info(cache).value("checkpoint", std::string());
      if (cached_from != teacher_checkpoint.string()) {
        RETORT_INPUT_CHECK(owns_cache(config),
                           "distill.cache_dir = '{}' holds the cache of the teacher checkpoint {}, not of {}: delete "
                           "it or choose another distill.cache_dir",
                           cache.string(), cached_from, teacher_checkpoint.string());
        spdlog::info("distill run: the cache in {} is of another teacher checkpoint; writing it anew", cache.string());
        fs::remove_all(cache);
      }
    }
    dist.barrier();
    const auto cache_start = std::chrono::steady_clock::now();
    TeacherTokenStream teacher_tokens;
    if (xtoken)
      teacher_tokens = {{xdata->stream.teacher_train_shards(), xdata->teacher_vocab}, xdata->teacher_fingerprint};
    const distill::TeacherTopKReport written =
        write_teacher_cache(pipeline_config, device, xtoken ? &teacher_tokens : nullptr);
    report.cache_seconds = seconds_since(cache_start);
    report.cache_tokens = written.cache_tokens;
    distill::TopKCacheSpec spec;
    spec.kind = cache_kind_from(config);
    spec.k = cache_entries_from(config);
    spec.value_type = distill::cache_value_type_from_name(config.get_string("distill.cache_dtype"));
    report.cache_bytes_per_token = static_cast<double>(spec.record_bytes());
  }

  // 3. The two students: the same shape, data order, steps and optimizer; one with KD, one on the labels.
  auto student_config = [&](const std::string& folder) {
    std::vector<std::string> overrides = stage_paths;
    overrides.push_back("run.dir=" + (report.run_dir / folder).string());
    return derived_config(config, overrides);
  };
  report.cache_kind = config.get_string("distill.cache_kind");
  report.on_policy_ratio = config.get_double("distill.on_policy_ratio");
  const bool sampled = !no_cache && cache_kind_from(config) == CacheKind::Sampled;
  const std::string kd_name =
      std::string(xtoken ? "cross-tokenizer KD" : "KD") +
      (on_policy  ? fmt::format(" (on-policy {:.0f}% of the steps)", 100 * config.get_double("distill.on_policy_ratio"))
       : no_cache ? " (online teacher)"
       : sampled  ? " (sampled cache)"
                  : " (top-k cache)");
  report.kd = train_student(kd_name, student_config("student_kd"), device, true);
  report.labels = train_student("labels only", student_config("student_labels"), device, false);

  // 4. Held-out evaluation of all three against the teacher. Each rank scores whole models alike (no collective, so
  // no rank waits on another's evaluation); rank 0 reports.
  spdlog::info("distill run: evaluating on the validation split");
  const TrainedModel teacher = load_trained_model(report.teacher_dir, dist.device);
  // The students' data (the teacher's too, unless the teacher is a Hugging Face folder, which has no data of its own).
  const std::vector<fs::path> val_shards = run_validation_shards(report.kd.run_dir);
  EvalOptions eval_options;
  eval_options.batch_size = config.get_int("train.batch_size");
  eval_options.seq_len = config.get_int("train.seq_len");
  // Bits per byte beside nats per token: the figure that stays comparable when tokenizers differ.
  const std::vector<int32_t> token_bytes = utf8_bytes_per_token(load_run_tokenizer(teacher));
  if (xtoken) {
    // Each model reads the held-out text in its own tokens: the teacher the paired stream's, the students theirs.
    // Windows of one sequence, so that all three leave out less than one window of text at the end.
    RETORT_INPUT_CHECK(!xdata->stream.val.teacher_shard.empty(),
                       "distill run compares the models on held-out text: set data.val_fraction above 0");
    eval_options.batch_size = 1;
    const std::vector<int32_t> student_bytes = utf8_bytes_per_token(load_run_tokenizer(report.kd.run_dir));
    report.teacher = evaluate_model(teacher, xdata->stream.teacher_val_shards(), eval_options, nullptr, &token_bytes);
    for (StudentOutcome* student : {&report.kd, &report.labels}) {
      const TrainedModel model = load_trained_model(student->run_dir, dist.device);
      student->eval = evaluate_model(model, val_shards, eval_options, nullptr, &student_bytes);
    }
  } else {
    report.teacher = evaluate_model(teacher, val_shards, eval_options, nullptr, &token_bytes);
    for (StudentOutcome* student : {&report.kd, &report.labels}) {
      const TrainedModel model = load_trained_model(student->run_dir, dist.device);
      student->eval = evaluate_model(model, val_shards, eval_options, &teacher, &token_bytes);
    }
  }
  report.total_seconds = seconds_since(run_start);
  if (!main) return report;

  // 5. results.json and the loss curves.
  nlohmann::json results{
      {"teacher", eval_json(report.teacher)},
      {"teacher_dir", report.teacher_dir.string()},
      {"teacher_trained", report.teacher_trained},
      {"teacher_seconds", report.teacher_seconds},
      {"mode", config.get_string("distill.mode")},
      {"on_policy_ratio", config.get_double("distill.on_policy_ratio")},
      {"cache_kind", no_cache ? std::string("none") : report.cache_kind},
      {"cache_seconds", report.cache_seconds},
      {"cache_tokens", report.cache_tokens},
      {"cache_bytes_per_token", report.cache_bytes_per_token},
      {"full_logit_bytes_per_token", 4 * (xtoken ? xdata->teacher_vocab : config.get_int("data.vocab_size"))},
      {"total_seconds", report.total_seconds}};
  for (const StudentOutcome* s : {&report.kd, &report.labels}) {
    nlohmann::json j = eval_json(s->eval);
    j["run_dir"] = s->run_dir.string();
    j["train_seconds"] = s->train_seconds;
    results[s == &report.kd ? "student_kd" : "student_labels"] = j;
  }
  results["cross_tokenizer"] = xtoken;
  if (xtoken) {
    results["teacher_tokenizer"] = xdata->teacher_fingerprint;
    results["paired_stream"] = xtoken_dir(config).string();
    // Per-token losses of two tokenizers are not comparable: the students are compared in bits per byte.
    results["kd_wins"] = report.kd.eval.bits_per_byte.value_or(0) < report.labels.eval.bits_per_byte.value_or(0);
  } else {
    results["kd_wins"] = report.kd.eval.loss < report.labels.eval.loss;
  }
  write_text_atomic(report.run_dir / "results.json", results.dump(2));
  PlotOptions plot;
  plot.title = "students: cross-entropy on the labels (train, smoothed) and on held-out text";
  write_loss_plot(report.run_dir / "loss_curves.svg",
                  {{"KD student, train", "#d62728", false, false, smoothed(report.kd.train_ce, 0.9)},
                   {"label-only student, train", "#1f77b4", false, false, smoothed(report.labels.train_ce, 0.9)},
                   {"KD student, validation", "#d62728", true, true, report.kd.eval_loss},
                   {"label-only student, validation", "#1f77b4", true, true, report.labels.eval_loss}},
                  plot);
  return report;
}

std::string format_report_table(const DistillRunReport& r) {
  // KL and agreement compare two distributions over one vocabulary: n/a across tokenizers (and "-" for the teacher).
  const std::string undefined = r.cross_tokenizer ? "n/a" : "-";
  auto row = [&undefined](const std::string& name, const EvalReport& e) {
    return fmt::format("  {:<22} {:>10.4f} {:>11.2f} {:>10} {:>12} {:>10}\n", name, e.loss, e.perplexity,
                       e.bits_per_byte ? fmt::format("{:.4f}", *e.bits_per_byte) : "-",
                       e.kl_to_teacher ? fmt::format("{:.4f}", *e.kl_to_teacher) : undefined,
                       e.top1_agreement ? fmt::format("{:.1f}%", 100 * *e.top1_agreement) : undefined);
  };
  std::string out =
      r.cross_tokenizer
          ? fmt::format(
                "  held-out text: {} bytes ({} teacher tokens, {} student tokens); loss and perplexity per "
                "token of each model's own tokenizer\n",
                r.kd.eval.bytes, r.teacher.tokens, r.kd.eval.tokens)
          : fmt::format("  held-out text: {} tokens\n", r.teacher.tokens);
  out += fmt::format("  {:<22} {:>10} {:>11} {:>10} {:>12} {:>10}\n", "model", "loss", "perplexity", "bits/byte",
                     "KL(teacher)", "top-1 agr.");
  out += row("teacher", r.teacher);
  out += row(r.on_policy_ratio >= 1                            ? "student, on-policy KD"
             : r.on_policy_ratio > 0                           ? "student, KD + on-policy"
             : r.cache_tokens > 0 && r.cache_kind == "sampled" ? "student, sampled KD"
                                                               : "student, KD",
             r.kd.eval);
  out += row("student, labels only", r.labels.eval);
  const double gain = r.cross_tokenizer ? r.labels.eval.bits_per_byte.value_or(0) - r.kd.eval.bits_per_byte.value_or(0)
                                        : r.labels.eval.loss - r.kd.eval.loss;
  out += fmt::format(
      "\n  the KD student is {:.4f} {} {} than the label-only one\n"
      "  time: teacher {}, cache {}, KD student {}, label-only student {}, total {} (a stage finished by an earlier "
      "run counts 0)\n"
      "  results.json and loss_curves.svg in {}\n",
      std::abs(gain), r.cross_tokenizer ? "bits/byte" : "nats/token", gain > 0 ? "better" : "worse",
      format_duration(r.teacher_seconds),
      r.cache_tokens > 0 ? fmt::format("{} ({} tokens, {:.0f} bytes/token)", format_duration(r.cache_seconds),
                                       r.cache_tokens, r.cache_bytes_per_token)
                         : std::string("none (the teacher runs in the student's steps)"),
      format_duration(r.kd.train_seconds), format_duration(r.labels.train_seconds), format_duration(r.total_seconds),
      r.run_dir.string());
  return out;
}

}  // namespace retort::distill
