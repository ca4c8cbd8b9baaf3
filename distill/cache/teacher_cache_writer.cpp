#include "distill/cache/teacher_cache_writer.h"

#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "distill/cache/cache_targets.h"
#include "distill/distill_config.h"
#include "distill/train/config_builders.h"
#include "distill/train/trained_model.h"
#include "distill/xtoken/paired_stream.h"
#include "parallel/launch/distributed_run.h"

namespace retort::distill {

namespace fs = std::filesystem;

distill::TeacherTopKReport write_teacher_cache(const ResolvedConfig& config, Device requested_device,
                                               const TeacherTokenStream* teacher_tokens) {
  const DistributedRun dist = start_distributed_run(requested_device, static_cast<int>(config.get_int("parallel.tp")),
                                                    comm_timeout_from(config));
  RETORT_INPUT_CHECK(dist.grid.dp_size == 1,
                     "retort distill topk runs one tensor-parallel group: launch exactly parallel.tp ranks (got {} "
                     "ranks for parallel.tp = {})",
                     dist.env.world_size, dist.grid.tp_size);
  const bool main = dist.is_main();
  TeacherTokenStream stream;
  if (teacher_tokens) {
    stream = *teacher_tokens;
  } else {
    if (!main) dist.barrier();
    const data::PreparedDataset dataset = data::prepare_token_dataset(dataset_options_from(config));
    stream = {{dataset.train_shards, dataset.vocab_size}, dataset.tokenizer_fingerprint};
    if (cross_tokenizer(config)) {
      // The cache covers the teacher's own tokens of the student's text: the paired stream of distill.xtoken.dir.
      RETORT_INPUT_CHECK(!dataset.tokenizer_path.empty(),
                         "distill.xtoken.enabled needs the student's tokenizer to turn its tokens into text: give "
                         "data.tokenizer with data.shards");
      const data::Tokenizer student = data::Tokenizer::load(dataset.tokenizer_path);
      const data::Tokenizer teacher = load_run_tokenizer(teacher_run_dir(config));
      const xtoken::PairedStream paired = xtoken::load_or_build_paired_stream(
          {xtoken_dir(config), dataset.train_shards, dataset.val_shards, dataset.vocab_size, &student, &teacher});
      stream = {{paired.teacher_train_shards(), teacher.vocab_size()}, teacher.fingerprint()};
    }
    if (main) dist.barrier();
  }

  const TrainedModel teacher = load_trained_model(teacher_run_dir(config), dist.device, dist.grid.tp);
  check_same_tokenizer(teacher, stream.tokenizer_id, stream.dataset.vocab_size, "teacher");
  const int64_t seq_len = config.get_int("train.seq_len");
  RETORT_INPUT_CHECK(seq_len <= teacher.model->config().block_size,
                     "train.seq_len = {} is longer than the teacher's context ({}): lower train.seq_len", seq_len,
                     teacher.model->config().block_size);

  const fs::path directory = cache_dir(config);
  const double temperature = config.get_double("distill.temperature");
  if (main) {
    fs::create_directories(directory);
    const CacheKind kind = cache_kind_from(config);
    if (fs::exists(directory / kCacheInfoFile)) {
      const std::string cached_kind = read_cache_info(directory).value("kind", std::string("topk"));
      RETORT_INPUT_CHECK(
          cached_kind == cache_kind_name(kind),
          "the folder '{}' holds a {} cache, the run writes a {} cache (distill.cache_kind): use another "
          "distill.cache_dir or delete it",
          directory.string(), cached_kind, cache_kind_name(kind));
      const double cached = read_cache_info(directory).value("temperature", 1.0);
      RETORT_INPUT_CHECK(cached == temperature,
                         "the folder '{}' holds a cache at temperature {}, not {}: use another distill.cache_dir or "
                         "delete it",
                         directory.string(), cached, temperature);
      if (kind == CacheKind::Sampled) {
        // Every setting the draws depend on: a resumed cache must continue the same draws.
        const nlohmann::json info = read_cache_info(directory);
        const std::pair<const char*, double> settings[] = {
            {"sample_k", static_cast<double>(config.get_int("distill.sample_k"))},
            {"sample_temperature", config.get_double("distill.sample_temperature")},
            {"sample_seed", static_cast<double>(config.get_int("distill.sample_seed"))}};
        for (const auto& [key, want] : settings) {
          const double have = info.value(key, want);
          RETORT_INPUT_CHECK(
              have == want,
              "the folder '{}' holds a sampled cache with {} = {}, the run asks for distill.{} = {}: use "
              "another distill.cache_dir or delete it",
              directory.string(), key, have, key, want);
        }
      }
    }
    nlohmann::json info{{"temperature", temperature},
                        {"teacher", teacher.run_dir.string()},
                        {"checkpoint", teacher.checkpoint.string()},
                        {"seq_len", seq_len},
                        {"kind", cache_kind_name(kind)}};
    if (kind == CacheKind::Sampled) {
      info["sample_k"] = config.get_int("distill.sample_k");
      info["sample_temperature"] = config.get_double("distill.sample_temperature");
      info["sample_seed"] = config.get_int("distill.sample_seed");
    }
    write_text_atomic(directory / kCacheInfoFile, info.dump(2));
  }

  distill::TeacherTopKOptions options;
  options.k = cache_entries_from(config);
  options.kind = cache_kind_from(config);
  options.sample_temperature = config.get_double("distill.sample_temperature");
  options.sample_seed = static_cast<uint64_t>(config.get_int("distill.sample_seed"));
  options.dtype = distill::cache_value_type_from_name(config.get_string("distill.cache_dtype"));
  options.batch_size = config.get_int("distill.topk_batch_size");
  options.seq_len = seq_len;
  options.output_dir = directory;
  options.temperature = temperature;
  options.tokenizer_id = stream.tokenizer_id;
  options.vocab = stream.dataset.vocab_size;
  options.device = dist.device;
  options.group = dist.grid.tp;
  const auto forward = [&teacher](const Tensor& tokens) { return inference_logits(teacher, tokens); };
  return distill::generate_teacher_topk(forward, stream.dataset, options);
}

}  // namespace retort::distill
