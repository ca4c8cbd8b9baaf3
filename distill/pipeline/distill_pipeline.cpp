#include "distill/pipeline/distill_pipeline.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "core/util/human_format.h"
#include "distill/cache/teacher_cache_writer.h"
#include "distill/distill_config.h"
#include "distill/distill_training.h"
#include "distill/report/loss_plot.h"
#include "distill/train/checkpoint.h"
#include "distill/train/config_builders.h"
#include "distill/train/training_loop.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The config with some keys replaced (the teacher's shape, a student's run directory).
ResolvedConfig derived(const ResolvedConfig& config, const std::vector<std::string>& overrides) {
  Config copy = Config::from_string(config.to_yaml(), "<distill run>");
  copy.apply_overrides(overrides);
  return copy.resolve(distill_schema());
}

// The step a run's latest checkpoint reached (0 without one).
int64_t finished_steps(const fs::path& run_dir) {
  const auto latest = latest_checkpoint(run_dir);
  if (!latest) return 0;
  return nlohmann::json::parse(read_file(*latest / "trainer.json")).value("step", int64_t{0});
}

// (step, key) of every metrics.jsonl line that has the key.
std::vector<std::pair<double, double>> metric_curve(const fs::path& run_dir, const std::string& key) {
  std::vector<std::pair<double, double>> curve;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains(key)) curve.emplace_back(record.at("step").get<double>(), record.at(key).get<double>());
  }
  return curve;
}

nlohmann::json eval_json(const EvalReport& e) {
  nlohmann::json j{{"loss", e.loss}, {"perplexity", e.perplexity}, {"tokens", e.tokens}};
  if (e.kl_to_teacher) j["kl_to_teacher"] = *e.kl_to_teacher;
  if (e.top1_agreement) j["top1_agreement"] = *e.top1_agreement;
  return j;
}

StudentOutcome train_student(const std::string& name, const ResolvedConfig& config, Device device, bool distill) {
  StudentOutcome outcome;
  outcome.name = name;
  outcome.run_dir = config.get_string("run.dir");
  fs::remove_all(outcome.run_dir);  // both students start from scratch, so the comparison is fair
  spdlog::info("distill run: training the {} student in {}", name, outcome.run_dir.string());
  const auto start = std::chrono::steady_clock::now();
  if (distill)
    run_distill_training(config, device, false);
  else
    run_label_training(config, device, false);
  outcome.train_seconds = seconds_since(start);
  // The KD student logs the labels' cross-entropy as "ce"; the label-only student's loss is that cross-entropy.
  outcome.train_ce = metric_curve(outcome.run_dir, distill ? "ce" : "loss");
  outcome.eval_loss = metric_curve(outcome.run_dir, "eval_loss");
  return outcome;
}

}  // namespace

DistillRunReport run_distillation_pipeline(const ResolvedConfig& config, Device device) {
  const auto run_start = std::chrono::steady_clock::now();
  DistillRunReport report;
  report.run_dir = config.get_string("run.dir");
  report.teacher_dir = teacher_run_dir(config);
  fs::create_directories(report.run_dir);
  write_text_atomic(report.run_dir / "config.yaml", config.to_yaml(true));

  // 1. The teacher: the student's data and optimizer settings with the teacher's shape and budget.
  const int64_t teacher_steps = config.get_int("teacher.steps");
  const ResolvedConfig teacher_config = derived(
      config,
      {"run.dir=" + report.teacher_dir.string(), fmt::format("model.n_layer={}", config.get_int("teacher.n_layer")),
       fmt::format("model.n_head={}", config.get_int("teacher.n_head")),
       fmt::format("model.n_embd={}", config.get_int("teacher.n_embd")), fmt::format("train.steps={}", teacher_steps),
       fmt::format("optim.lr={}", config.get_double("teacher.lr")),
       fmt::format("optim.min_lr={}", config.get_double("teacher.min_lr"))});
  const int64_t done = finished_steps(report.teacher_dir);
  if (done < teacher_steps) {
    spdlog::info("distill run: training the teacher in {}{}", report.teacher_dir.string(),
                 done > 0 ? fmt::format(" (resuming at step {})", done) : std::string());
    const auto start = std::chrono::steady_clock::now();
    run_label_training(teacher_config, device, done > 0);
    report.teacher_seconds = seconds_since(start);
    report.teacher_trained = true;
    // A cache of an earlier teacher must not be reused for this one.
    fs::remove_all(cache_dir(config));
  } else {
    spdlog::info("distill run: using the trained teacher in {} ({} steps)", report.teacher_dir.string(), done);
  }

  // 2. The top-k cache over the training split (resumed or reused when it is already there).
  const auto cache_start = std::chrono::steady_clock::now();
  const distill::TeacherTopKReport cache = write_teacher_cache(config, device);
  report.cache_seconds = seconds_since(cache_start);
  report.cache_tokens = cache.cache_tokens;
  {
    const int k = static_cast<int>(config.get_int("distill.k"));
    distill::TopKCacheSpec spec;
    spec.k = k;
    spec.value_type = distill::cache_value_type_from_name(config.get_string("distill.cache_dtype"));
    report.cache_bytes_per_token = static_cast<double>(spec.record_bytes());
  }

  // 3. The two students: the same shape, data order, steps and optimizer; one with KD, one on the labels.
  report.kd =
      train_student(distill_mode_from(config) == DistillMode::kOnline ? "KD (online teacher)" : "KD (top-k cache)",
                    derived(config, {"run.dir=" + (report.run_dir / "student_kd").string()}), device, true);
  report.labels = train_student(
      "labels only", derived(config, {"run.dir=" + (report.run_dir / "student_labels").string()}), device, false);

  // 4. Held-out evaluation of all three against the teacher.
  spdlog::info("distill run: evaluating on the validation split");
  const TrainedModel teacher = load_trained_model(report.teacher_dir, device);
  const std::vector<fs::path> val_shards = run_validation_shards(report.teacher_dir);
  EvalOptions eval_options;
  eval_options.batch_size = config.get_int("train.batch_size");
  eval_options.seq_len = config.get_int("train.seq_len");
  report.teacher = evaluate_model(teacher, val_shards, eval_options);
  for (StudentOutcome* student : {&report.kd, &report.labels}) {
    const TrainedModel model = load_trained_model(student->run_dir, device);
    student->eval = evaluate_model(model, val_shards, eval_options, &teacher);
  }
  report.total_seconds = seconds_since(run_start);

  // 5. results.json and the loss curves.
  nlohmann::json results{{"teacher", eval_json(report.teacher)},
                         {"teacher_dir", report.teacher_dir.string()},
                         {"teacher_trained", report.teacher_trained},
                         {"teacher_seconds", report.teacher_seconds},
                         {"cache_seconds", report.cache_seconds},
                         {"cache_tokens", report.cache_tokens},
                         {"cache_bytes_per_token", report.cache_bytes_per_token},
                         {"full_logit_bytes_per_token", 4 * config.get_int("data.vocab_size")},
                         {"total_seconds", report.total_seconds}};
  for (const StudentOutcome* s : {&report.kd, &report.labels}) {
    nlohmann::json j = eval_json(s->eval);
    j["run_dir"] = s->run_dir.string();
    j["train_seconds"] = s->train_seconds;
    results[s == &report.kd ? "student_kd" : "student_labels"] = j;
  }
  results["kd_wins"] = report.kd.eval.loss < report.labels.eval.loss;
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
  auto row = [](const std::string& name, const EvalReport& e) {
    return fmt::format("  {:<22} {:>10.4f} {:>11.2f} {:>12} {:>10}\n", name, e.loss, e.perplexity,
                       e.kl_to_teacher ? fmt::format("{:.4f}", *e.kl_to_teacher) : "-",
                       e.top1_agreement ? fmt::format("{:.1f}%", 100 * *e.top1_agreement) : "-");
  };
  std::string out = fmt::format("  held-out text: {} tokens\n  {:<22} {:>10} {:>11} {:>12} {:>10}\n", r.teacher.tokens,
                                "model", "loss", "perplexity", "KL(teacher)", "top-1 agr.");
  out += row("teacher", r.teacher);
  out += row("student, KD", r.kd.eval);
  out += row("student, labels only", r.labels.eval);
  const double gain = r.labels.eval.loss - r.kd.eval.loss;
  out += fmt::format(
      "\n  the KD student is {:.4f} nats/token {} than the label-only one\n"
      "  time: teacher {}, cache {} ({} tokens, {:.0f} bytes/token), KD student {}, label-only student {}, total {}\n"
      "  results.json and loss_curves.svg in {}\n",
      std::abs(gain), gain > 0 ? "better" : "worse", format_duration(r.teacher_seconds),
      format_duration(r.cache_seconds), r.cache_tokens, r.cache_bytes_per_token, format_duration(r.kd.train_seconds),
      format_duration(r.labels.train_seconds), format_duration(r.total_seconds), r.run_dir.string());
  return out;
}

}  // namespace retort::distill
