#include "distill/pipeline/xtoken_stage.h"

#include <spdlog/spdlog.h>

#include "core/config/config.h"
#include "core/util/error.h"
#include "distill/distill_config.h"
#include "distill/train/config_builders.h"
#include "distill/train/trained_model.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

// The data options of the teacher's tokenizer: the students' corpus with teacher.data.* in place of data.*.
data::DatasetOptions teacher_dataset_options(const ResolvedConfig& config) {
  std::vector<std::string> overrides{"data.dir=" + teacher_data_dir(config).string(),
                                     fmt::format("data.vocab_size={}", config.get_int("teacher.data.vocab_size")),
                                     "data.tokenizer=" + config.get_string("teacher.data.tokenizer")};
  overrides.push_back("data.tokenizer_type=" + config.get_string("teacher.data.tokenizer_type"));
  Config copy = Config::from_string(config.to_yaml(), "<teacher data>");
  copy.apply_overrides(overrides);
  return dataset_options_from(copy.resolve(distill_schema()));
}

}  // namespace

fs::path teacher_data_dir(const ResolvedConfig& config) {
  const std::string dir = config.get_string("teacher.data.dir");
  if (!dir.empty()) return dir;
  fs::path student = config.get_string("data.dir");
  return student.parent_path() / (student.filename().string() + "-teacher");
}

XtokenData prepare_xtoken_data(const ResolvedConfig& config, const fs::path& external_teacher,
                               const DistributedRun& dist) {
  const bool main = dist.is_main();
  XtokenData out;
  // Rank 0 makes every folder first; the others wait, then find them made (each step reuses what is on disk).
  if (!main) dist.barrier();
  out.student = data::prepare_token_dataset(dataset_options_from(config));
  RETORT_INPUT_CHECK(!out.student.tokenizer_path.empty(),
                     "distill.xtoken.enabled needs the student's tokenizer to turn its tokens into text: give "
                     "data.tokenizer with data.shards, or a data.corpus");
  std::optional<data::Tokenizer> teacher;
  if (!external_teacher.empty()) {
    teacher.emplace(load_run_tokenizer(external_teacher));
  } else {
    const data::PreparedDataset teacher_data = data::prepare_token_dataset(teacher_dataset_options(config));
    teacher.emplace(data::Tokenizer::load(teacher_data.tokenizer_path));
  }
  const data::Tokenizer student = data::Tokenizer::load(out.student.tokenizer_path);
  out.teacher_tokenizer = teacher->model_path();
  out.teacher_fingerprint = teacher->fingerprint();
  out.teacher_vocab = teacher->vocab_size();
  if (teacher->fingerprint() == student.fingerprint())
    spdlog::warn("distill run: distill.xtoken.enabled, but the teacher's tokenizer is the student's ({})",
                 student.fingerprint());
  out.stream =
      xtoken::load_or_build_paired_stream({xtoken_dir(config), out.student.train_shards, out.student.val_shards,
                                           out.student.vocab_size, &student, &*teacher});
  if (main) dist.barrier();
  return out;
}

std::vector<std::string> xtoken_teacher_data_overrides(const XtokenData& data, const ResolvedConfig& config) {
  std::vector<std::string> overrides{"data.corpus=''", "data.shards=" + data.stream.train.teacher_shard.string(),
                                     "data.tokenizer_type=" + config.get_string("teacher.data.tokenizer_type"),
                                     "data.tokenizer=" + data.teacher_tokenizer.string(),
                                     fmt::format("data.vocab_size={}", data.teacher_vocab)};
  if (!data.stream.val.teacher_shard.empty())
    overrides.push_back("data.val_shards=" + data.stream.val.teacher_shard.string());
  return overrides;
}

}  // namespace retort::distill
