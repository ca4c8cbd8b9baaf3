#pragma once
// The keys of the distillation commands: every `retort train` key (they describe the student and its data) plus
// distill.* (the teacher, the cache and the loss) and teacher.* (the teacher that `retort distill run` trains
// when distill.teacher holds no checkpoint yet). `retort distill train --help-config` lists them.
#include <filesystem>

#include "core/config/config_schema.h"
#include "core/config/resolved_config.h"
#include "distill/cache/topk_cache.h"
#include "losses/topk_distillation.h"

namespace retort::distill {

inline constexpr const char* kDistillTrainRunDir = "runs/distill-student";  // `retort distill train`
inline constexpr const char* kDistillRunDir = "runs/distill-run";           // `retort distill run` and `topk`

ConfigSchema distill_schema(const std::string& default_run_dir = kDistillTrainRunDir);

// distill.mode
enum class DistillMode { kCache, kOnline };
DistillMode distill_mode_from(const ResolvedConfig& config);

// distill.cache_kind, and the entries per token of that kind's cache (distill.k or distill.sample_k).
CacheKind cache_kind_from(const ResolvedConfig& config);
int cache_entries_from(const ResolvedConfig& config);

// The top-k loss of the distill.* keys (tp group and normaliser left for the trainer); the sampled forward KL for a
// sampled cache.
losses::TopkDistillationOptions topk_loss_options_from(const ResolvedConfig& config);

// distill.teacher, or run.dir/teacher when it is empty.
std::filesystem::path teacher_run_dir(const ResolvedConfig& config);
// distill.cache_dir, or default_cache_dir() when it is empty.
std::filesystem::path cache_dir(const ResolvedConfig& config);
// run.dir/teacher_topk, or run.dir/teacher_sampled for distill.cache_kind=sampled.
std::filesystem::path default_cache_dir(const ResolvedConfig& config);
// distill.xtoken.dir, or run.dir/xtoken when it is empty.
std::filesystem::path xtoken_dir(const ResolvedConfig& config);
// distill.xtoken.enabled: the teacher has a tokenizer of its own.
bool cross_tokenizer(const ResolvedConfig& config);
// Whether distill.teacher names a teacher of its own (not the one `distill run` trains in run.dir/teacher).
bool has_external_teacher(const ResolvedConfig& config);

}  // namespace retort::distill
