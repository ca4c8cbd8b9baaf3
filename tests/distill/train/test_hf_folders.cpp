// Hugging Face folders in the training layer: `model.from` takes the model configuration (and the tokenizer path)
// from the folder; a trained llama run exports to a folder that loads back with the same logits; a llama run whose
// vocabulary does not divide by tp serves at tp 4 from its dense checkpoint (the vocabulary re-padded on load).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/autograd/grad_mode.h"
#include "core/util/error.h"
#include "distill/train/hf_export_run.h"
#include "distill/train/trained_model.h"
#include "distill/train/training_loop.h"
#include "parallel/comm/thread_ranks.h"
#include "parallel/models/hf_checkpoint.h"
#include "tests/distill/train/training_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

const fs::path kQwen3 = fs::path(RETORT_SOURCE_DIR) / "tests/data/hf/models/qwen3_qknorm_f16";

std::vector<std::string> tiny_llama(const fs::path& run_dir) {
  auto args = testing::tiny_overrides(run_dir);
  args.insert(args.end(), {"model.family=llama", "model.n_head=4", "model.n_kv_head=2", "model.intermediate_size=64",
                           "data.vocab_size=510"});
  args.push_back("data.dir=" + testing::process_temp_path("tiny_data_510").string());
  return args;
}

Tensor probe_tokens(int64_t vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 2 * 16; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  return Tensor::from_ints(ids, {2, 16});
}

TEST(HfFolders, ModelFromTakesTheFoldersConfigAndTokenizer) {
  auto args = testing::tiny_overrides(testing::fresh_dir("model_from"));
  args.push_back("model.from=" + kQwen3.string());
  const ResolvedConfig config = testing::resolve(args);
  const GptConfig model = gpt_config_from(config, 384);
  EXPECT_EQ(model.family, "qwen3");
  EXPECT_EQ(model.vocab_size, 390);  // the folder's, not data.vocab_size
  EXPECT_EQ(model.head_size(), 16);  // explicit in its config.json (4 heads of 16 over a width of 32)
  EXPECT_TRUE(model.qk_norm);
  EXPECT_EQ(dataset_options_from(config).tokenizer, kQwen3 / "tokenizer.json");
  const std::string message = ::retort::testing::message_of([&] { gpt_config_from(config, 400); });
  EXPECT_NE(message.find("model.from"), std::string::npos) << message;
  EXPECT_NE(message.find("400"), std::string::npos) << message;
}

// A fine-tuned folder's run keeps the folder's tokenizer and vocabulary (data.vocab_size, left at its default, does
// not apply): its tokenizer is found
// from the run folder alone, as a cross-tokenizer distillation reads a teacher's.
TEST(HfFolders, AFineTunedRunsTokenizerIsFoundFromTheRunFolder) {
  const fs::path run = testing::fresh_dir("hf_finetuned_tokenizer");
  auto args = testing::tiny_overrides(run);
  args.insert(args.end(), {"model.from=" + kQwen3.string(), "data.vocab_size=8192",
                           "data.dir=" + testing::process_temp_path("tiny_data_qwen3").string()});
  run_label_training(testing::resolve(args), Device::cpu(), false);
  const data::Tokenizer tokenizer = load_run_tokenizer(run);
  const data::Tokenizer folders = data::Tokenizer::load(kQwen3 / "tokenizer.json");
  EXPECT_EQ(tokenizer.vocab_size(), folders.vocab_size());
  EXPECT_EQ(tokenizer.fingerprint(), folders.fingerprint());
  EXPECT_EQ(load_trained_model(run, Device::cpu()).vocab_size, folders.vocab_size());
  fs::remove_all(run);
}

TEST(HfFolders, ALlamaRunExportsToAFolderWithTheSameLogits) {
  const fs::path run = testing::fresh_dir("hf_export_run"), out = testing::fresh_dir("hf_export_out");
  run_label_training(testing::resolve(tiny_llama(run)), Device::cpu(), false);
  const HfExportSummary summary = export_run_to_hf(run, out);
  EXPECT_EQ(summary.family, "llama");
  ASSERT_TRUE(summary.tokenizer.has_value());
  EXPECT_TRUE(fs::exists(out / "tokenizer.model"));
  nlohmann::json config;
  std::ifstream(out / "config.json") >> config;
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["vocab_size"], 510);
  NoGradGuard no_grad;
  const TrainedModel trained = load_trained_model(run, Device::cpu());
  const Tensor ids = probe_tokens(510);
  EXPECT_EQ(inference_logits(trained, ids).to_doubles(), load_hf_model(out)->forward(ids).to_doubles());
  // A second export into the same folder writes nothing.
  EXPECT_THROW(export_run_to_hf(run, out), InputError);
  fs::remove_all(run);
  fs::remove_all(out);
}

TEST(HfFolders, ALlamaRunWithAVocabularyThatDoesNotDivideServesAtTp4) {
  const fs::path run = testing::fresh_dir("hf_padded_reshard");
  run_label_training(testing::resolve(tiny_llama(run)), Device::cpu(), false);
  NoGradGuard no_grad;
  const std::vector<double> dense =
      inference_logits(load_trained_model(run, Device::cpu()), probe_tokens(510)).to_doubles();
  run_ranks(4, [&](std::shared_ptr<Communicator> group) {
    NoGradGuard no_grad_here;
    const TrainedModel model = load_trained_model(run, Device::cpu(), group);
    const std::vector<double> local = inference_logits(model, probe_tokens(510)).to_doubles();
    const int64_t width = 128, start = group->rank() * width;  // 512 rows over 4 ranks
    ASSERT_EQ(local.size(), static_cast<size_t>(32 * width));
    for (int64_t row = 0; row < 32; ++row)
      for (int64_t c = 0; c < width; ++c) {
        const double got = local[static_cast<size_t>(row * width + c)];
        if (start + c >= 510) {
          EXPECT_TRUE(std::isinf(got) && got < 0);
        } else {
          EXPECT_NEAR(got, dense[static_cast<size_t>(row * 510 + start + c)], 2e-5 * (1 + std::abs(got)));
        }
      }
  });
  fs::remove_all(run);
}

}  // namespace
}  // namespace retort::distill
