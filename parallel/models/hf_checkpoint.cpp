#include "parallel/models/hf_checkpoint.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/io/safetensors.h"
#include "core/io/safetensors_slices.h"
#include "core/tensor/slicing.h"
#include "core/util/error.h"
#include "core/util/suggest.h"
#include "parallel/models/hf_config.h"
#include "parallel/tp/sharding.h"

namespace retort {
namespace {

std::string shape_text(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Which file holds each tensor: the index's weight_map, or every tensor of the single model.safetensors.
std::map<std::string, std::filesystem::path> tensor_files(const std::filesystem::path& folder) {
  std::map<std::string, std::filesystem::path> files;
  const auto index_path = folder / "model.safetensors.index.json";
  if (std::filesystem::is_regular_file(index_path)) {
    nlohmann::json index;
    try {
      std::ifstream stream(index_path);
      index = nlohmann::json::parse(stream);
    } catch (const nlohmann::json::exception& error) {
      throw InputError(fmt::format("'{}' is not valid JSON ({})", index_path.string(), error.what()));
    }
    RETORT_INPUT_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                       "'{}' has no \"weight_map\" object naming the file of every tensor", index_path.string());
    for (const auto& [name, file] : index["weight_map"].items()) {
      RETORT_INPUT_CHECK(file.is_string(), "'{}': the weight_map entry of '{}' must be a file name, got {}",
                         index_path.string(), name, file.dump());
      files[name] = folder / file.get<std::string>();
    }
    return files;
  }
  const auto single = folder / "model.safetensors";
  RETORT_INPUT_CHECK(std::filesystem::is_regular_file(single),
                     "'{}' has neither model.safetensors nor model.safetensors.index.json", folder.string());
  for (const SafetensorsTensorInfo& info : read_safetensors_header(single).tensors) files[info.name] = single;
  return files;
}

}  // namespace

std::shared_ptr<GptModel> load_hf_model(const std::filesystem::path& folder, std::shared_ptr<Communicator> tp_group) {
  auto model = std::make_shared<GptModel>(gpt_config_from_hf(folder), std::move(tp_group));
  load_hf_weights(*model, folder);
  return model;
}

void load_hf_weights(GptModel& model, const std::filesystem::path& folder) {
  const GptConfig& config = model.config();
  RETORT_INPUT_CHECK(config.llama_family(),
                     "Hugging Face checkpoints load into the llama, qwen2 and qwen3 families, not model.family '{}'",
                     config.family);
  const std::map<std::string, std::filesystem::path> files = tensor_files(folder);
  const int tp = tp::group_size(model.tp_group()), rank = tp::group_rank(model.tp_group());
  const int64_t padded = config.padded_vocab(tp);

  std::map<std::filesystem::path, std::unique_ptr<SafetensorsSliceReader>> readers;
  std::set<std::string> loaded;
  std::vector<std::string> parameter_names;
  for (auto& [name, param] : model.named_parameters()) {
    parameter_names.push_back(name);
    const auto found = files.find(name);
    RETORT_INPUT_CHECK(found != files.end(), "the checkpoint in '{}' has no tensor '{}', which the {} model needs",
                       folder.string(), name, config.family);
    auto& reader = readers[found->second];
    if (!reader) reader = std::make_unique<SafetensorsSliceReader>(found->second);
    const SafetensorsTensorInfo* info = reader->find(name);
    RETORT_INPUT_CHECK(info != nullptr, "the index of '{}' puts tensor '{}' in '{}', which has no such tensor",
                       folder.string(), name, found->second.string());

    const ShardingSpec& spec = param.sharding();
    const bool split = tp > 1 && spec.partition_dim >= 0;
    Shape want = split ? tp::full_shape(param.shape(), spec, tp) : param.shape();
    // The vocabulary tables hold padded rows the checkpoint does not have.
    const bool vocab_rows = want.size() == 2 && want[0] == padded && padded != config.vocab_size &&
                            (name == "model.embed_tokens.weight" || name == "lm_head.weight");
    if (vocab_rows) want[0] = config.vocab_size;
    RETORT_INPUT_CHECK(info->shape == want,
                       "tensor '{}' in '{}' has shape {}, but the model configured by config.json needs {}", name,
                       found->second.string(), shape_text(info->shape), shape_text(want));
    RETORT_CHECK(!split || spec.blocks == 1, "'{}': a Llama-family parameter split in {} blocks", name, spec.blocks);

    Tensor value;
    if (!split) {
      value = reader->read_f32(name);
    } else {
      const int dim = spec.partition_dim;
      const int64_t chunk = param.size(dim), start = rank * chunk;
      const int64_t real = std::clamp<int64_t>(want[static_cast<size_t>(dim)] - start, 0, chunk);
      value = reader->read_f32(name, dim, start, real);
      if (real < chunk) {
        Shape rest = param.shape();
        rest[static_cast<size_t>(dim)] = chunk - real;
        value = real == 0 ? Tensor::zeros(rest) : concat({value, Tensor::zeros(rest)}, dim);
      }
    }
    if (vocab_rows && !split) value = concat({value, Tensor::zeros({padded - config.vocab_size, want[1]})}, 0);
    Tensor handle = param;
    handle.copy_(value.to(param.dtype()).to(param.device()));
    loaded.insert(name);
  }
  for (const auto& [name, file] : files) {
    RETORT_INPUT_CHECK(loaded.count(name) != 0,
                       "the checkpoint in '{}' has tensor '{}' (in '{}'), which the {} model configured by its "
                       "config.json does not have{}",
                       folder.string(), name, file.filename().string(), config.family,
                       did_you_mean(name, parameter_names));
  }
}

}  // namespace retort
