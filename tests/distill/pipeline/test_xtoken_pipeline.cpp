// `retort distill run` across tokenizers (distill.xtoken.enabled): a teacher with a BPE tokenizer of 512 ids trained
// on its own tokens of the students' text, students with one of 384 ids; the table in bits per byte, KL and
// agreement n/a; stopped in the KD student and resumed, the same figures; online mode against the same teacher; a
// teacher of another tokenizer without the key is an error naming it. And the objective's loss on one micro-batch
// against a direct float64 computation of the chunk KL.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "core/data/loader.h"
#include "core/util/error.h"
#include "distill/distill_training.h"
#include "distill/objectives/xtoken_objective.h"
#include "distill/pipeline/distill_pipeline.h"
#include "distill/pipeline/teacher_reuse.h"
#include "distill/train/config_builders.h"
#include "distill/train/trained_model.h"
#include "distill/xtoken/vocab_projection_file.h"
#include "tests/distill/distill_run_support.h"
#include "tests/losses/chunk_reference.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> xtoken_overrides(const fs::path& run_dir) {
  auto o = testing::pipeline_run_overrides(run_dir);
  o.insert(o.end(), {"distill.xtoken.enabled=true", "teacher.data.vocab_size=512",
                     "teacher.data.dir=" + testing::process_temp_path("xtoken_teacher_data").string()});
  return o;
}

DistillRunReport run_pipeline(std::vector<std::string> overrides, RunStart start,
                              const std::vector<std::string>& more = {}) {
  overrides.insert(overrides.end(), more.begin(), more.end());
  return run_distillation_pipeline(testing::resolve_distill(overrides), Device::cpu(), start);
}

const fs::path& straight_xtoken_pipeline() {
  static const fs::path dir = [] {
    const fs::path run = testing::fresh_dir("xtoken_pipeline_straight");
    const DistillRunReport report = run_pipeline(xtoken_overrides(run), RunStart::kNew);
    const std::string table = format_report_table(report);
    EXPECT_NE(table.find("bits/byte"), std::string::npos) << table;
    EXPECT_NE(table.find("n/a"), std::string::npos) << table;
    return run;
  }();
  return dir;
}

nlohmann::json results_of(const fs::path& run) {
  return nlohmann::json::parse(::retort::testing::read_bytes(run / "results.json"));
}

TEST(XtokenPipeline, ComparesTheModelsInBitsPerByteOfTheSameTextWithoutPerTokenKl) {
  const fs::path& run = straight_xtoken_pipeline();
  const nlohmann::json r = results_of(run);
  EXPECT_TRUE(r.at("cross_tokenizer").get<bool>());
  for (const char* model : {"teacher", "student_kd", "student_labels"}) {
    const auto& e = r.at(model);
    ASSERT_TRUE(e.contains("bits_per_byte")) << model;
    EXPECT_FALSE(e.contains("kl_to_teacher")) << model << ": KL across two vocabularies is undefined";
    EXPECT_FALSE(e.contains("top1_agreement")) << model;
    EXPECT_NEAR(e.at("bits_per_byte").get<double>(),
                e.at("loss").get<double>() * e.at("tokens").get<double>() / std::log(2.0) / e.at("bytes").get<double>(),
                1e-9)
        << model;
  }
  // Both students read the same windows; the teacher, with 512 ids, needs fewer tokens for about the same text.
  EXPECT_EQ(r.at("student_kd").at("bytes"), r.at("student_labels").at("bytes"));
  EXPECT_LT(r.at("teacher").at("tokens").get<double>(), r.at("student_kd").at("tokens").get<double>());
  EXPECT_NEAR(r.at("teacher").at("bytes").get<double>() / r.at("student_kd").at("bytes").get<double>(), 1.0, 0.05);
  // The teacher trained on its own tokens of the students' training split, its tokenizer recorded.
  const ResolvedConfig teacher = load_run_config(run / "teacher");
  EXPECT_EQ(fs::path(teacher.get_string("data.shards")), run / "xtoken" / "teacher_train_000.bin");
  EXPECT_EQ(teacher.get_int("data.vocab_size"), 512);
  EXPECT_NE(r.at("teacher_tokenizer").get<std::string>(), load_run_tokenizer(run / "student_kd").fingerprint());
  // The KD student logs the chunk statistics and the batch-building time.
  const auto metrics = testing::read_metrics(run / "student_kd");
  ASSERT_FALSE(metrics.empty());
  for (const char* key : {"kd", "ce", "chunk_coverage", "xtoken_batch_ms", "teacher_ms"})
    EXPECT_TRUE(metrics.back().contains(key)) << key;
  EXPECT_GT(metrics.back().at("chunk_coverage").get<double>(), 0.5);
  EXPECT_LE(metrics.back().at("chunk_coverage").get<double>(), 1.0);
  const nlohmann::json objective =
      nlohmann::json::parse(::retort::testing::read_bytes(run / "student_kd" / "objective.json"));
  EXPECT_EQ(objective.at("name"), "xtoken");
  EXPECT_EQ(objective.at("teacher_signal"), "topk_cache");
}

TEST(XtokenPipeline, StoppedInTheKdStudentAndResumedGivesTheSameFigures) {
  const fs::path& straight = straight_xtoken_pipeline();
  const fs::path run = testing::fresh_dir("xtoken_pipeline_interrupted");
  EXPECT_THROW(run_pipeline(xtoken_overrides(run), RunStart::kNew, {"train.inject_nan_at_step=10"}), Error);
  ASSERT_TRUE(fs::exists(run / "student_kd" / "checkpoints" / "step_00000008"));
  const DistillRunReport resumed = run_pipeline(xtoken_overrides(run), RunStart::kResume);
  EXPECT_FALSE(resumed.teacher_trained);
  const nlohmann::json a = results_of(straight), b = results_of(run);
  for (const char* model : {"teacher", "student_kd", "student_labels"})
    for (const char* key : {"loss", "bits_per_byte", "tokens", "bytes"})
      EXPECT_EQ(a.at(model).at(key), b.at(model).at(key)) << model << " " << key;
  const auto x = testing::read_metrics(straight / "student_kd"), y = testing::read_metrics(run / "student_kd");
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i].at("loss"), y[i].at("loss")) << "step " << i + 1;
}

TEST(XtokenPipeline, OnlineModeUsesTheNamedTeacherAndWritesNoCache) {
  const fs::path teacher = straight_xtoken_pipeline() / "teacher";
  const fs::path run = testing::fresh_dir("xtoken_pipeline_online");
  const DistillRunReport report = run_pipeline(xtoken_overrides(run), RunStart::kNew,
                                               {"distill.mode=online", "distill.teacher=" + teacher.string()});
  EXPECT_FALSE(report.teacher_trained);
  EXPECT_FALSE(fs::exists(run / "teacher_topk"));
  EXPECT_TRUE(fs::exists(run / "xtoken" / xtoken::kPairedStreamManifest));
  const nlohmann::json objective =
      nlohmann::json::parse(::retort::testing::read_bytes(run / "student_kd" / "objective.json"));
  EXPECT_EQ(objective.at("teacher_signal"), "online");
  EXPECT_TRUE(report.kd.eval.bits_per_byte.has_value());
  // The label-only student does not depend on the teacher: the same as in the cache-mode run.
  EXPECT_EQ(results_of(run).at("student_labels").at("loss"),
            results_of(straight_xtoken_pipeline()).at("student_labels").at("loss"));
}

TEST(XtokenPipeline, DistillTopkAloneWritesTheSameCacheOverTheTeachersOwnTokens) {
  const fs::path& straight = straight_xtoken_pipeline();
  const fs::path dir = testing::fresh_dir("xtoken_topk_alone");
  auto overrides = xtoken_overrides(dir / "unused");
  overrides.insert(overrides.end(), {"distill.teacher=" + (straight / "teacher").string(),
                                     "distill.cache_dir=" + (dir / "cache").string(),
                                     "distill.xtoken.dir=" + (dir / "xtoken").string()});
  const TeacherTopKReport report = write_teacher_cache(testing::resolve_distill(overrides), Device::cpu());
  EXPECT_EQ(report.cache_tokens, results_of(straight).at("cache_tokens").get<int64_t>());
  EXPECT_TRUE(fs::exists(dir / "xtoken" / xtoken::kPairedStreamManifest)) << "the paired stream is made when missing";
  EXPECT_EQ(::retort::testing::read_bytes(dir / "cache" / "topk_00000.bin"),
            ::retort::testing::read_bytes(straight / "teacher_topk" / "topk_00000.bin"));
}

TEST(XtokenPipeline, AGoldLossStudentTrainsWithDynamicScaling) {
  const fs::path& straight = straight_xtoken_pipeline();
  const fs::path run = testing::fresh_dir("xtoken_gold");
  auto overrides = xtoken_overrides(run);
  overrides.insert(overrides.end(), {"distill.mode=online", "distill.teacher=" + (straight / "teacher").string(),
                                     "distill.xtoken.dir=" + (straight / "xtoken").string(), "distill.xtoken.loss=gold",
                                     "distill.xtoken.dynamic_ce_scaling=true", "train.steps=4"});
  const TrainResult result = run_distill_training(testing::resolve_distill(overrides), Device::cpu(), RunStart::kNew);
  ASSERT_EQ(result.train_losses.size(), 4u);
  for (double loss : result.train_losses) EXPECT_TRUE(std::isfinite(loss));
  const nlohmann::json objective = nlohmann::json::parse(::retort::testing::read_bytes(run / "objective.json"));
  EXPECT_EQ(objective.at("loss"), "gold");
  EXPECT_EQ(objective.at("dynamic_ce_scaling"), true);
  // sg(|CE| / |KD|) KD + CE: the loss is twice the labels' cross-entropy.
  const auto metrics = testing::read_metrics(run);
  EXPECT_NEAR(metrics[0].at("loss").get<double>(), 2 * metrics[0].at("ce").get<double>(),
              1e-5 * metrics[0].at("ce").get<double>());
}

TEST(XtokenPipeline, ATeacherOfAnotherTokenizerWithoutTheKeyIsAnErrorNamingIt) {
  const fs::path teacher = straight_xtoken_pipeline() / "teacher";
  const fs::path run = testing::fresh_dir("xtoken_no_key");
  auto overrides = testing::pipeline_run_overrides(run);
  overrides.insert(overrides.end(), {"distill.mode=online", "distill.teacher=" + teacher.string()});
  try {
    run_distill_training(testing::resolve_distill(overrides), Device::cpu(), RunStart::kNew);
    FAIL() << "a teacher of another tokenizer was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("distill.xtoken.enabled=true"), std::string::npos) << e.what();
  }
}

// A cross-tokenizer teacher's tokenizer comes from teacher.data.*: when a resumed run's teacher was trained with
// another vocabulary, the error names the key the user sets (teacher.data.vocab_size), not the students' data.*.
TEST(XtokenPipeline, AResumedTeacherOfAnotherVocabularyNamesTheTeacherDataKey) {
  const fs::path teacher = straight_xtoken_pipeline() / "teacher";
  Config changed = Config::load(teacher / "config.yaml");
  changed.apply_override("data.vocab_size=600");
  const ResolvedConfig teacher_config = changed.resolve(distill_schema());
  try {
    check_teacher_matches(teacher, teacher_config, /*own_tokenizer=*/true);
    FAIL() << "a teacher of another vocabulary was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("set teacher.data.vocab_size=512"), std::string::npos) << what;
    EXPECT_NE(what.find("data.vocab_size = 512"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(check_teacher_matches(teacher, load_run_config(teacher), true));
}

// The objective's loss on one micro-batch (online teacher) against the chunk KL computed in float64 from the
// teacher's full logits (its own top-k, sorted here), the projection as a dense matrix and the batch's chunks.
TEST(XtokenObjective, TheLossOfAMicroBatchIsTheFloat64ChunkKlOfItsTeacherRows) {
  const fs::path& straight = straight_xtoken_pipeline();
  const fs::path run = testing::fresh_dir("xtoken_objective");
  auto overrides = xtoken_overrides(run);
  overrides.insert(overrides.end(), {"distill.mode=online", "distill.teacher=" + (straight / "teacher").string(),
                                     "distill.xtoken.dir=" + (straight / "xtoken").string(), "distill.kd_ratio=0.7",
                                     "distill.temperature=2", "distill.k=6"});
  const ResolvedConfig config = testing::resolve_distill(overrides);
  const data::PreparedDataset dataset = data::prepare_token_dataset(dataset_options_from(config));
  CrossTokenizerObjective objective;
  objective.prepare(RunContext{Device::cpu(), DType::F32, nullptr, nullptr, &config, &dataset});

  data::TokenLoader loader(dataset.train_shards, dataset.vocab_size, {2, 16, data::LoaderMode::kTrain, 5, 0, 1, 0});
  const data::TokenBatch batch = loader.next();
  const int64_t B = batch.batch, T = batch.seq, V = dataset.vocab_size;
  chunk_testing::ChunkProblem p;
  p.rows = B * T;
  p.vocab = V;
  std::mt19937 rng(3);
  std::normal_distribution<double> normal(0.0, 2.0);
  p.logits.resize(static_cast<size_t>(p.rows * V));
  for (double& v : p.logits) v = normal(rng);
  const Tensor logits = Tensor::from_doubles(p.logits, {B, T, V}, DType::F64);
  const ObjectiveLoss got = objective.micro_batch_loss(logits, batch);

  // The same batch's teacher rows and chunks, the teacher's logits, and the projection as the objective reads them.
  const TrainedModel teacher = load_trained_model(straight / "teacher", Device::cpu());
  const data::Tokenizer student_tok = data::Tokenizer::load(dataset.tokenizer_path);
  const data::Tokenizer teacher_tok = load_run_tokenizer(teacher);
  xtoken::PairedStream stream = xtoken::load_or_build_paired_stream(
      {straight / "xtoken", dataset.train_shards, dataset.val_shards, V, &student_tok, &teacher_tok});
  ASSERT_TRUE(stream.reused);
  xtoken::XtokenBatch xb =
      xtoken::build_xtoken_batch(batch, stream.train, xtoken::token_texts(student_tok),
                                 xtoken::token_texts(teacher_tok), teacher.model->config().block_size);
  const int64_t L = xb.teacher_seq, K = 6;
  const std::vector<float> teacher_logits =
      inference_logits(teacher, Tensor::from_ints(xb.teacher_inputs, {B, L})).to_floats();
  const int64_t Vt = teacher.vocab_size;
  p.teacher_rows = B * L;
  p.teacher_vocab = Vt;
  p.topk = K;
  for (int64_t t = 0; t < B * L; ++t) {
    std::vector<double> z(static_cast<size_t>(Vt));
    for (int64_t v = 0; v < Vt; ++v) z[v] = teacher_logits[static_cast<size_t>(t * Vt + v)] / 2.0;
    const double m = *std::max_element(z.begin(), z.end());
    double s = 0;
    for (double v : z) s += std::exp(v - m);
    std::vector<int32_t> order(static_cast<size_t>(Vt));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
    for (int64_t j = 0; j < K; ++j) {
      p.teacher_ids.push_back(order[j]);
      p.teacher_logprobs.push_back(chunk_testing::as_f32(z[order[j]] - m - std::log(s)));
    }
  }
  p.student_chunk = xb.student_chunk;
  p.teacher_chunk = xb.teacher_chunk;
  p.chunk_count = xb.chunk_count;
  p.labels = batch.targets;
  const xtoken::StudentTeacherProjection saved = xtoken::load_projection(
      straight / "xtoken" / xtoken::kVocabProjectionFile, xtoken::projection_identity(student_tok, teacher_tok, V, Vt));
  const losses::VocabProjection& projection = saved.matrix;
  p.row_offsets = projection.row_offsets.to_ints();
  p.proj_ids = projection.teacher_ids.to_ints();
  for (float w : projection.weights.to_floats()) p.proj_weights.push_back(w);
  chunk_testing::ReferenceOptions o;
  o.temperature = 2.0;
  o.kd_ratio = 0.7;
  const chunk_testing::DenseResult want = chunk_testing::dense_reference(p, o);
  ASSERT_GT(xb.chunk_count, 4);
  EXPECT_NEAR(got.loss.item(), want.loss, 1e-5 * std::abs(want.loss));
  EXPECT_NEAR(got.metrics.at("kd"), want.kd, 1e-5 * std::abs(want.kd));
  EXPECT_NEAR(got.metrics.at("ce"), want.ce, 1e-9 * std::abs(want.ce));
  EXPECT_NEAR(got.metrics.at("chunk_coverage"),
              static_cast<double>(
                  std::count_if(xb.student_chunk.begin(), xb.student_chunk.end(), [](int32_t c) { return c >= 0; })) /
                  static_cast<double>(B * T),
              1e-12);
}

}  // namespace
}  // namespace retort::distill
