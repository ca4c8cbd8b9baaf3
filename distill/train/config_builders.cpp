#include "distill/train/config_builders.h"

#include "core/config/config_binding.h"
#include "core/data/corpus.h"
#include "core/util/error.h"
#include "optim/optimizer_factory.h"
#include "optim/rekls/rekls_routing.h"
#include "parallel/models/hf_config.h"

namespace retort::distill {

ConfigSchema training_schema(const std::string& default_run_dir) {
  ConfigSchema s;
  s.add_string("run.dir", default_run_dir,
               "run directory: config, metrics.jsonl, checkpoints (a folder that holds a run is refused unless "
               "--resume or --overwrite says what to do)");
  s.add_int("run.seed", 1337, "seed of the initial weights and the data order").min(0);
  s.add_string("run.device", "cpu", "cpu, cuda or cuda:N (the --device flag overrides it)");

  s.add_string("data.corpus", data::kDefaultCorpus,
               "text corpus: a file, a folder or a glob; .jsonl files are JSON lines (one document per line, its "
               "text in data.text_field), other files plain text (documents end at blank lines, or at '%' lines)");
  s.add_string("data.text_field", data::kDefaultTextField, "the field of a .jsonl corpus line that holds its text");
  s.add_string("data.dir", "data/fortunes",
               "where the tokenizer and the token shards are cached; a folder made from another corpus, vocab size "
               "or tokenizer is refused, never rebuilt: give each corpus its own folder");
  s.add_int("data.vocab_size", 8192,
            "vocabulary size of the model; of the BPE tokenizer trained on the corpus, or equal to data.tokenizer's, "
            "or above every id of data.shards")
      .range(256, 1 << 20);
  s.add_string("data.tokenizer", "",
               "a tokenizer file used as it is instead of training one: a SentencePiece .model or a Hugging Face "
               "tokenizer.json (byte-level BPE; its vocabulary, added tokens included, must have data.vocab_size "
               "ids); empty: train a BPE tokenizer on data.corpus");
  s.add_string("data.tokenizer_type", "bpe",
               "the SentencePiece algorithm of the tokenizer trained on data.corpus: bpe or unigram (ignored with "
               "data.tokenizer); a data.dir made with the other type is refused")
      .choices({"bpe", "unigram"});
  s.add_string("data.shards", "",
               "pre-tokenized training shards in llm.c's .bin format, used as they are (a file or a glob, e.g. "
               "'fineweb10B/*_train_*.bin'); set, they replace data.corpus (leave it at its default or '') and "
               "data.dir");
  s.add_string("data.val_shards", "",
               "with data.shards: the validation shards (a file or a glob, e.g. 'fineweb10B/*_val_*.bin'); empty: "
               "no validation");
  s.add_float("data.val_fraction", 0.05,
              "share of the corpus' tokens held out for validation, as whole documents (0: no validation split, "
              "and no validation during training)")
      .min(0)
      .less_than(1);

  s.add_string("model.family", "gpt",
               "decoder family: gpt (learned positions, GELU MLP, fused q|k|v), llama (RMSNorm, rotary positions, "
               "grouped-query attention, SwiGLU MLP, no biases), qwen2 (llama with q/k/v biases) or qwen3 (llama with "
               "a per-head RMSNorm of q and k); the llama family ignores model.bias and model.norm")
      .choices({"gpt", "llama", "qwen2", "qwen3"});
  s.add_string("model.from", "",
               "a Hugging Face checkpoint folder (config.json, model.safetensors, tokenizer.json) to fine-tune: the "
               "model's family and sizes come from its config.json (every other model.* size key is ignored), its "
               "weights replace the initialisation, and its tokenizer.json is data.tokenizer unless that is set "
               "(data.vocab_size must then be the tokenizer's id count); empty: a new model of the model.* keys");
  s.add_int("model.block_size", 128, "context length the position embedding covers").range(1, 1 << 20);
  s.add_int("model.n_layer", 4, "transformer blocks").range(1, 1024);
  s.add_int("model.n_head", 4, "attention heads").range(1, 1024);
  s.add_int("model.n_embd", 256, "residual width (a multiple of n_head)").range(1, 1 << 16);
  s.add_int("model.mlp_ratio", 4, "MLP hidden width / n_embd").range(1, 64);
  s.add_int("model.n_kv_head", 0,
            "llama family: key/value heads of grouped-query attention (a divisor of n_head); 0: n_head")
      .range(0, 1024);
  s.add_int("model.head_dim", 0, "llama family: width of each attention head (even); 0: n_embd / n_head")
      .range(0, 1 << 12);
  s.add_int("model.intermediate_size", 0, "llama family: SwiGLU MLP width; 0: mlp_ratio x n_embd").range(0, 1 << 20);
  s.add_float("model.rope_theta", 10000.0, "llama family: base of the rotary position frequencies").greater_than(0);
  s.add_bool("model.bias", true, "biases in linear layers and LayerNorm");
  s.add_bool("model.tie_weights", true, "LM head shares the token embedding");
  s.add_string("model.norm", "layernorm", "normalisation").choices({"layernorm", "rmsnorm"});
  s.add_float("model.init_std", 0.02, "standard deviation of the initial weights").greater_than(0);
  s.add_string("model.dtype", "f32", "compute dtype (parameters and optimizer state stay f32)")
      .choices({"f32", "bf16"});

  s.add_int("train.batch_size", 16, "sequences per micro-batch").range(1, 1 << 20);
  s.add_int("train.seq_len", 128, "tokens per sequence (at most model.block_size)").range(1, 1 << 20);
  s.add_int("train.grad_accum", 1, "micro-batches per optimizer step").range(1, 1 << 16);
  s.add_int("train.steps", 1000, "optimizer steps").range(1, int64_t{1} << 40);
  s.add_int("train.log_every", 10, "steps between metric lines (plain-log mode)").min(1);
  s.add_int("train.eval_every", 100, "steps between validations (0: only at the end)").min(0);
  s.add_int("train.eval_batches", 20, "validation batches per evaluation").min(1);
  s.add_int("train.checkpoint_every", 200, "steps between checkpoints (0: only at the end)").min(0);
  s.add_int("train.keep_checkpoints", 2, "most recent checkpoints kept").min(1);
  s.add_string("train.cuda_graphs", "auto",
               "replay each step as CUDA graphs after the first (auto: where the run allows it: one GPU, adamw, the "
               "labels' plain cross-entropy or the top-k cache's distillation; on: the same, and say why when it does "
               "not apply; off: never)")
      .choices({"auto", "on", "off"});
  s.add_int("train.inject_nan_at_step", -1,
            "fault injection for tests: make this step's loss train.inject_loss_value (-1: off)");
  s.add_string("train.inject_loss_value", "nan", "the loss train.inject_nan_at_step injects: nan, inf or -inf")
      .choices({"nan", "inf", "-inf"});

  s.add_string("optim.name", "adamw",
               "optimizer: adamw, or rekls (REKLS on the matrices, TP-REKLS when parallel.tp > 1, AdamW on the "
               "parameters optim.rekls_adamw_params names and on vectors)")
      .choices({"adamw", "rekls"});
  s.add_float("optim.lr", 1e-3, "peak learning rate").greater_than(0);
  s.add_float("optim.min_lr", 1e-4, "learning rate at the end of the decay").min(0);
  s.add_string("optim.schedule", "cosine", "decay after warmup").choices({"constant", "cosine", "linear"});
  s.add_int("optim.warmup_steps", 50, "linear warmup steps").min(0);
  s.add_float("optim.weight_decay", 0.1, "decoupled weight decay of matrices").min(0);
  s.add_float("optim.beta1", 0.9, "first-moment decay (AdamW and REKLS)").range(0, 0.999999);
  s.add_float("optim.beta2", 0.95, "second-moment decay (AdamW and REKLS)").range(0, 0.999999);
  s.add_float("optim.eps", 1e-8, "epsilon of the moments (and REKLS's eigenvalue floor)").greater_than(0);
  s.add_float("optim.shampoo_beta", 0.95, "REKLS Kronecker-factor decay").range(0, 0.999999);
  s.add_string("optim.rekls_adamw_params", "wte,wpe,lm_head,embed",
               "with optim.name=rekls: comma-separated parts of parameter names that go to AdamW instead (every "
               "tensor that is not 2-D does too)");
  s.add_float("optim.grad_clip", 1.0, "global gradient norm limit (0: off)").min(0);

  s.add_int("parallel.tp", 1,
            "tensor-parallel ranks per model replica (the launch's ranks / tp replicas "
            "train data-parallel)")
      .range(1, 4096);
  s.add_float("parallel.timeout_s", 300,
              "seconds any rank waits for a peer (joining, or in a collective) before the run stops with an error "
              "naming the lost peer; a dead rank's peers fail at once, a hung one's after this long")
      .greater_than(0);

  s.add_string("loss.name", "cross_entropy", "training loss").choices({"cross_entropy"});
  s.add_int("loss.ignore_index", -100, "target id that contributes no loss");
  s.add_float("loss.label_smoothing", 0.0, "label smoothing alpha over the global vocabulary").min(0).less_than(1);
  s.add_string("loss.smoothing_convention", "megatron",
               "megatron: 1 - alpha on the label, alpha / (V - 1) elsewhere; pytorch: as torch's cross_entropy")
      .choices({"megatron", "pytorch"});
  s.add_float("loss.z_loss", 0.0, "weight of the z-loss (lse^2) that keeps logits from drifting").min(0);

  s.add_check([](const ResolvedConfig& c) -> std::string {
    if (const std::string from = c.get_string("model.from"); !from.empty()) {
      // The model's sizes come from its config.json; the model.* sizes of the YAML do not apply.
      const int64_t context = gpt_config_from_hf(from).block_size;
      if (c.get_int("train.seq_len") > context)
        return fmt::format(
            "train.seq_len = {} is longer than the context of model.from '{}' (max_position_embeddings {}): set "
            "train.seq_len={} or less",
            c.get_int("train.seq_len"), from, context, context);
    } else {
      if (c.get_int("model.n_embd") % c.get_int("model.n_head") != 0)
        return "model.n_embd must be a multiple of model.n_head";
      if (c.get_int("train.seq_len") > c.get_int("model.block_size"))
        return "train.seq_len must not exceed model.block_size";
    }
    if (c.get_double("optim.min_lr") > c.get_double("optim.lr")) return "optim.min_lr must not exceed optim.lr";
    const std::string& corpus = c.get_string("data.corpus");
    if (!c.get_string("data.shards").empty() && !corpus.empty() && corpus != data::kDefaultCorpus)
      return "data.shards and data.corpus are both set: pre-tokenized shards replace the corpus; drop one of them "
             "(data.corpus='' clears it)";
    if (c.get_string("data.shards").empty() && !c.get_string("data.val_shards").empty())
      return "data.val_shards is set without data.shards: give the training shards too, or drop data.val_shards";
    return {};
  });
  return s;
}

data::DatasetOptions dataset_options_from(const ResolvedConfig& c) {
  static const ConfigBinding<data::DatasetOptions> binding{{"data.corpus", &data::DatasetOptions::corpus},
                                                           {"data.text_field", &data::DatasetOptions::text_field},
                                                           {"data.dir", &data::DatasetOptions::data_dir},
                                                           {"data.vocab_size", &data::DatasetOptions::vocab_size},
                                                           {"data.tokenizer", &data::DatasetOptions::tokenizer},
                                                           {"data.shards", &data::DatasetOptions::train_shards},
                                                           {"data.val_shards", &data::DatasetOptions::val_shards},
                                                           {"data.val_fraction", &data::DatasetOptions::val_fraction},
                                                           {"run.seed", &data::DatasetOptions::seed}};
  data::DatasetOptions options = binding.read(c);
  options.tokenizer_type = data::parse_tokenizer_model_type(c.get_string("data.tokenizer_type"), "data.tokenizer_type");
  // A fine-tuned Hugging Face model reads its own tokenizer, and the vocabulary is the tokenizer's.
  if (const std::string from = c.get_string("model.from"); !from.empty()) {
    if (options.tokenizer.empty()) options.tokenizer = std::filesystem::path(from) / "tokenizer.json";
    options.vocab_size = 0;
  }
  return options;
}

std::chrono::milliseconds comm_timeout_from(const ResolvedConfig& config) {
  return std::chrono::milliseconds(static_cast<int64_t>(1000 * config.get_double("parallel.timeout_s")));
}

GptConfig gpt_config_from(const ResolvedConfig& c, int64_t vocab_size) {
  static const ConfigBinding<GptConfig> binding{{"model.block_size", &GptConfig::block_size},
                                                {"model.n_layer", &GptConfig::n_layer},
                                                {"model.n_head", &GptConfig::n_head},
                                                {"model.n_embd", &GptConfig::n_embd},
                                                {"model.mlp_ratio", &GptConfig::mlp_ratio},
                                                {"model.bias", &GptConfig::bias},
                                                {"model.tie_weights", &GptConfig::tie_weights},
                                                {"model.norm", &GptConfig::norm},
                                                {"model.init_std", &GptConfig::init_std},
                                                {"model.family", &GptConfig::family},
                                                {"model.n_kv_head", &GptConfig::n_kv_head},
                                                {"model.head_dim", &GptConfig::head_dim},
                                                {"model.intermediate_size", &GptConfig::intermediate_size}};
  if (const std::string from = c.get_string("model.from"); !from.empty()) {
    GptConfig hf = gpt_config_from_hf(from);
    // The head may have more rows than the tokenizer has ids (Qwen pads it); never fewer.
    RETORT_INPUT_CHECK(vocab_size <= hf.vocab_size,
                       "model.from '{}' has a vocabulary of {} rows but the data's tokenizer has {} ids: fine-tune it "
                       "with its own tokenizer (leave data.tokenizer empty, or give its tokenizer.json)",
                       from, hf.vocab_size, vocab_size);
    return hf;
  }
  GptConfig g = binding.read(c);
  g.vocab_size = vocab_size;
  if (g.llama_family()) {
    g.norm = "rmsnorm";
    g.bias = false;
    g.qkv_bias = g.family == "qwen2";
    g.qk_norm = g.family == "qwen3";
    g.rope.theta = c.get_double("model.rope_theta");
  }
  g.validate();
  return g;
}

optim::LrSchedule lr_schedule_from(const ResolvedConfig& c) {
  static const ConfigBinding<optim::LrSchedule> binding{{"optim.schedule", &optim::LrSchedule::kind},
                                                        {"optim.lr", &optim::LrSchedule::peak_lr},
                                                        {"optim.min_lr", &optim::LrSchedule::min_lr},
                                                        {"optim.warmup_steps", &optim::LrSchedule::warmup_steps},
                                                        {"train.steps", &optim::LrSchedule::total_steps}};
  const optim::LrSchedule s = binding.read(c);
  s.validate();
  return s;
}

optim::OptimizerSpec optimizer_spec_from(const ResolvedConfig& c) {
  optim::OptimizerSpec spec;
  spec.name = c.get_string("optim.name");
  spec.adamw = {c.get_double("optim.beta1"), c.get_double("optim.beta2"), c.get_double("optim.eps")};
  spec.weight_decay = c.get_double("optim.weight_decay");
  spec.shampoo_beta = c.get_double("optim.shampoo_beta");
  spec.rekls_adamw_name_patterns = optim::split_name_patterns(c.get_string("optim.rekls_adamw_params"));
  return spec;
}

std::unique_ptr<optim::Optimizer> optimizer_from(const ResolvedConfig& c, const nn::NamedTensors& params,
                                                 std::shared_ptr<Communicator> tp_group) {
  return optim::make_optimizer(optimizer_spec_from(c), params, std::move(tp_group));
}

}  // namespace retort::distill
