#include "distill/pipeline/teacher_reuse.h"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "core/config/config_value.h"
#include "core/util/error.h"
#include "distill/train/trained_model.h"

namespace retort::distill {

namespace fs = std::filesystem;

void check_teacher_matches(const fs::path& teacher_dir, const ResolvedConfig& teacher_config, bool own_tokenizer) {
  if (!fs::exists(teacher_dir / "config.yaml")) return;
  const ResolvedConfig saved = load_run_config(teacher_dir);
  // (key in the teacher's run, the key of the pipeline's config that sets it). A cross-tokenizer teacher's
  // tokenizer and token folder come from teacher.data.*, so that is the key a user changes to match.
  const std::string data_key = own_tokenizer ? "teacher.data." : "data.";
  const std::vector<std::pair<std::string, std::string>> keys{
      {"model.n_layer", "teacher.n_layer"},
      {"model.n_head", "teacher.n_head"},
      {"model.n_embd", "teacher.n_embd"},
      {"model.block_size", "model.block_size"},
      {"model.mlp_ratio", "model.mlp_ratio"},
      {"model.bias", "model.bias"},
      {"model.tie_weights", "model.tie_weights"},
      {"model.norm", "model.norm"},
      // The tokenizer and the documents it was trained on follow from these; run.seed draws the validation split.
      {"data.corpus", "data.corpus"},
      {"data.dir", data_key + "dir"},
      {"data.vocab_size", data_key + "vocab_size"},
      {"data.tokenizer_type", data_key + "tokenizer_type"},
      {"data.val_fraction", "data.val_fraction"},
      {"run.seed", "run.seed"},
  };
  for (const auto& [key, config_key] : keys) {
    const std::string was = format_config_value(saved.get(key)), now = format_config_value(teacher_config.get(key));
    RETORT_INPUT_CHECK(was == now,
                       "the teacher in '{}' was trained with {} = {}, but this config has {} = {}: set {}={} to reuse "
                       "it, or add --overwrite to delete this run (teacher, cache and students) and train anew, or "
                       "choose another run.dir",
                       teacher_dir.string(), key, was, config_key, now, config_key, was);
  }
}

}  // namespace retort::distill
