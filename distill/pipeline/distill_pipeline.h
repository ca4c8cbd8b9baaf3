#pragma once
// `retort distill run`: the whole off-policy distillation experiment in one command. Trains the teacher (the
// teacher.* shape and budget, on the student's data) in run.dir/teacher unless distill.teacher names one, writes
// its teacher cache (run.dir/teacher_topk, or teacher_sampled; none in online mode), trains the student with KD in
// run.dir/student_kd and, with the same steps, batch and optimizer, the same student on the labels only in
// run.dir/student_labels; evaluates teacher and both students on the held-out split; writes results.json and
// loss_curves.svg into run.dir and returns the figures. With distill.xtoken.enabled the teacher has a tokenizer of its
// own (pipeline/xtoken_stage.h) and the models are compared in bits per byte of the same held-out text. The run folder
// follows run_folder.h: a new run refuses a folder that holds one; kResume continues each stage where it stopped (the
// teacher and the students from their latest checkpoints, or not at all when finished, the cache from its last shard)
// and reuses a teacher only when check_teacher_matches agrees; kOverwrite deletes the run's own outputs first (a
// teacher or cache named outside run.dir is never deleted). On several ranks (parallel.tp of them in cache mode; any dp
// x tp in online mode) every stage runs on all of them; each rank evaluates the whole models alike at the end, and rank
// 0 alone writes results.json and the plot.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/config/resolved_config.h"
#include "core/tensor/device.h"
#include "distill/train/evaluation.h"
#include "distill/train/run_folder.h"

namespace retort::distill {

struct StudentOutcome {
  std::string name;
  std::filesystem::path run_dir;
  EvalReport eval;
  double train_seconds = 0;
  std::vector<std::pair<double, double>> train_ce;   // (step, cross-entropy on the batch's labels)
  std::vector<std::pair<double, double>> eval_loss;  // (step, validation loss)
};

struct DistillRunReport {
  std::filesystem::path run_dir;
  std::filesystem::path teacher_dir;
  bool teacher_trained = false;  // false: an existing teacher was loaded
  EvalReport teacher;
  double teacher_seconds = 0;
  double cache_seconds = 0;
  int64_t cache_tokens = 0;
  double cache_bytes_per_token = 0;
  std::string cache_kind = "topk";  // distill.cache_kind: "topk" or "sampled" (its KD student's signal)
  double on_policy_ratio = 0;       // distill.on_policy_ratio: the KD student's share of on-policy steps
  StudentOutcome kd, labels;
  double total_seconds = 0;
  bool main_rank = true;  // world rank 0: the one that reports
  // distill.xtoken.enabled: the teacher reads the text through its own tokenizer; the table compares bits per byte.
  bool cross_tokenizer = false;
};

// The names the pipeline writes into run.dir (the teacher and cache folders when they are its own).
std::vector<std::string> pipeline_run_outputs(const ResolvedConfig& config);

DistillRunReport run_distillation_pipeline(const ResolvedConfig& config, Device device,
                                           RunStart start = RunStart::kNew);

// The comparison table printed at the end of the run.
std::string format_report_table(const DistillRunReport& report);

}  // namespace retort::distill
