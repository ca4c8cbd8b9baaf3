#pragma once
// The small distillation run the distillation tests share: a 40 kB corpus, a teacher wider and deeper than the
// student trained on it, and the teacher's f32 top-k cache, built once per test process; and the keys of a
// student of that teacher.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/tensor/device.h"
#include "distill/cache/teacher_cache_writer.h"
#include "distill/distill_config.h"
#include "distill/train/training_loop.h"
#include "tests/distill/train/training_run_support.h"

namespace retort::distill::testing {

namespace fs = std::filesystem;

// A small corpus (the first 40 kB of one fortunes file) so the teacher, its cache and the students take seconds.
inline std::vector<std::string> small_run_overrides(const fs::path& run_dir) {
  static const fs::path corpus = [] {
    const fs::path file = process_temp_path("distill_corpus.txt");
    std::ifstream in("/usr/share/games/fortunes/computers", std::ios::binary);
    std::string text(40000, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }();
  return {"run.dir=" + run_dir.string(),
          "data.corpus=" + corpus.string(),
          "data.dir=" + process_temp_path("distill_data").string(),
          "data.vocab_size=384",
          "model.block_size=16",
          "model.n_layer=1",
          "model.n_head=2",
          "model.n_embd=32",
          "train.batch_size=8",
          "train.seq_len=16",
          "train.eval_every=0",
          "train.eval_batches=2",
          "train.checkpoint_every=0",
          "optim.warmup_steps=2",
          "optim.lr=3e-3",
          "optim.min_lr=3e-3"};
}

// The keys of a whole `distill run` that takes seconds: a 12 kB corpus (the cache covers its training split), a
// 2 x 48 teacher of 8 steps and two 1 x 32 students of 12, all checkpointed every 4 steps.
inline std::vector<std::string> pipeline_run_overrides(const fs::path& run_dir) {
  static const fs::path corpus = [] {
    const fs::path file = process_temp_path("pipeline_corpus.txt");
    std::ifstream in("/usr/share/games/fortunes/computers", std::ios::binary);
    std::string text(12000, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }();
  auto overrides = small_run_overrides(run_dir);
  overrides.insert(overrides.end(),
                   {"data.corpus=" + corpus.string(), "data.dir=" + process_temp_path("pipeline_data").string(),
                    "teacher.n_layer=2", "teacher.n_head=2", "teacher.n_embd=48", "teacher.steps=8",
                    "teacher.checkpoint_every=4", "teacher.lr=3e-3", "teacher.min_lr=3e-3", "train.steps=12",
                    "train.checkpoint_every=4", "distill.k=8", "distill.cache_dtype=f32", "distill.kd_ratio=0.9"});
  return overrides;
}

inline ResolvedConfig resolve_distill(std::vector<std::string> overrides) {
  Config config;
  config.apply_overrides(overrides);
  return config.resolve(distill_schema());
}

// The overrides of a student of the shared teacher, its cache in the teacher's folder.
inline std::vector<std::string> student_overrides(const fs::path& root, const fs::path& run_dir) {
  auto overrides = small_run_overrides(run_dir);
  overrides.insert(overrides.end(), {"train.steps=24", "distill.teacher=" + (root / "teacher").string(),
                                     "distill.cache_dir=" + (root / "cache").string(), "distill.k=8",
                                     "distill.cache_dtype=f32", "distill.kd_ratio=0.9"});
  return overrides;
}

// A teacher wider and deeper than the student, trained on the same data, and its f32 top-k cache: built once
// per test process.
inline const fs::path& teacher_with_cache() {
  static const fs::path root = [] {
    const fs::path dir = fresh_dir("distill_teacher");
    auto teacher_overrides = small_run_overrides(dir / "teacher");
    teacher_overrides.insert(teacher_overrides.end(), {"model.n_layer=2", "model.n_embd=48", "train.steps=40"});
    run_label_training(resolve_distill(teacher_overrides), Device::cpu(), false);
    const distill::TeacherTopKReport report =
        write_teacher_cache(resolve_distill(student_overrides(dir, dir / "unused")), Device::cpu());
    EXPECT_GT(report.cache_tokens, 0);
    return dir;
  }();
  return root;
}

}  // namespace retort::distill::testing
