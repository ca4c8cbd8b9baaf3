// Checkpoints carry a manifest of their files' sizes and content hashes: a flipped bit or a truncated file is an
// error naming the file on every load; --resume with a damaged newest checkpoint continues from the newest intact
// one (and then logs exactly the losses of an uninterrupted run); with none intact it is an error, never a silent
// fresh start; what a crash in the middle of a save leaves is cleaned; `latest` naming a missing folder is an error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/tensor/device.h"
#include "distill/train/checkpoint_integrity.h"
#include "distill/train/trained_model.h"
#include "distill/train/training_loop.h"
#include "tests/distill/train/training_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;
using ::retort::testing::message_of;
using ::retort::testing::read_bytes;
using ::retort::testing::write_bytes;

// The tiny run (checkpoints at steps 3 and 6, both kept) with `steps` steps.
std::vector<std::string> run_of(const fs::path& dir, int steps) {
  std::vector<std::string> o = testing::tiny_overrides(dir);
  o.push_back("train.steps=" + std::to_string(steps));
  return o;
}

fs::path step_dir(const fs::path& run, int step) {
  return run / "checkpoints" / fmt::format("step_{:08d}", step);
}

// Flips one bit in the middle of `file`, keeping its size.
void flip_a_bit(const fs::path& file) {
  std::string bytes = read_bytes(file);
  bytes[bytes.size() / 2] ^= 0x10;
  write_bytes(file, bytes);
}

class CheckpointIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = testing::fresh_dir("checkpoint_integrity");
    run_label_training(testing::resolve(run_of(run_, 6)), Device::cpu(), RunStart::kNew);
  }
  void TearDown() override { fs::remove_all(run_); }
  fs::path run_;
};

TEST_F(CheckpointIntegrity, EverySaveRecordsItsFiles) {
  EXPECT_EQ(checkpoint_damage(step_dir(run_, 6)), "");
  const std::string manifest = read_bytes(step_dir(run_, 6) / "manifest.json");
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "trainer.json"})
    EXPECT_NE(manifest.find(file), std::string::npos) << file;
}

TEST_F(CheckpointIntegrity, AFlippedBitIsAnErrorNamingTheFileNotWeights) {
  flip_a_bit(step_dir(run_, 6) / "model.safetensors");
  const std::string message = message_of([&] { load_trained_model(run_, Device::cpu()); });
  EXPECT_NE(message.find("step_00000006 is damaged: model.safetensors has content hash"), std::string::npos) << message;
  // A truncated file is named with both sizes.
  const fs::path optimizer = step_dir(run_, 3) / "optimizer.safetensors";
  const std::string bytes = read_bytes(optimizer);
  write_bytes(optimizer, bytes.substr(0, bytes.size() - 10));
  EXPECT_NE(
      checkpoint_damage(step_dir(run_, 3))
          .find(fmt::format("optimizer.safetensors holds {} bytes, {} were saved", bytes.size() - 10, bytes.size())),
      std::string::npos)
      << checkpoint_damage(step_dir(run_, 3));
}

TEST_F(CheckpointIntegrity, ResumeFallsBackToTheNewestIntactCheckpointAndContinuesExactly) {
  const fs::path straight = testing::fresh_dir("checkpoint_integrity_straight");
  run_label_training(testing::resolve(run_of(straight, 9)), Device::cpu(), RunStart::kNew);
  flip_a_bit(step_dir(run_, 6) / "optimizer.safetensors");
  run_label_training(testing::resolve(run_of(run_, 9)), Device::cpu(), RunStart::kResume);
  const auto a = testing::read_metrics(straight), b = testing::read_metrics(run_);
  ASSERT_EQ(a.size(), 9U);
  ASSERT_EQ(b.size(), 9U) << "steps 4-6 logged again after the fall-back to step 3, once each";
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].at("loss"), b[i].at("loss")) << "step " << i + 1;
  fs::remove_all(straight);
}

TEST_F(CheckpointIntegrity, NoIntactCheckpointIsAnErrorNotAFreshStart) {
  flip_a_bit(step_dir(run_, 6) / "model.safetensors");
  flip_a_bit(step_dir(run_, 3) / "trainer.json");
  const std::string message =
      message_of([&] { run_label_training(testing::resolve(run_of(run_, 9)), Device::cpu(), RunStart::kResume); });
  EXPECT_NE(message.find("the run keeps no intact one"), std::string::npos) << message;
  EXPECT_EQ(testing::read_metrics(run_).size(), 6U) << "nothing was trained or logged";
}

TEST_F(CheckpointIntegrity, WhatACrashedSaveLeftIsCleanedAndRestored) {
  const fs::path root = run_ / "checkpoints";
  // A save of step 9 that died before its rename, and a re-save of step 3 that died between moving the old folder
  // aside and renaming the new one in.
  fs::create_directories(root / ".tmp_step_00000009");
  write_bytes(root / ".tmp_step_00000009" / "model.safetensors", "half a file");
  fs::rename(step_dir(run_, 3), root / ".old_step_00000003");
  clean_interrupted_saves(run_);
  EXPECT_FALSE(fs::exists(root / ".tmp_step_00000009"));
  EXPECT_FALSE(fs::exists(root / ".old_step_00000003"));
  EXPECT_EQ(checkpoint_damage(step_dir(run_, 3)), "") << "the complete folder moved aside is back";
  // A leftover beside a folder that exists is removed, the folder kept.
  fs::create_directories(root / ".old_step_00000006");
  clean_interrupted_saves(run_);
  EXPECT_FALSE(fs::exists(root / ".old_step_00000006"));
  EXPECT_TRUE(fs::exists(step_dir(run_, 6) / "model.safetensors"));
  // The run resumes past them.
  run_label_training(testing::resolve(run_of(run_, 9)), Device::cpu(), RunStart::kResume);
  EXPECT_EQ(testing::read_metrics(run_).size(), 9U);
}

TEST_F(CheckpointIntegrity, LatestNamingAMissingFolderIsAClearError) {
  write_bytes(run_ / "checkpoints" / "latest", "step_00000099\n");
  const std::string message =
      message_of([&] { run_label_training(testing::resolve(run_of(run_, 9)), Device::cpu(), RunStart::kResume); });
  EXPECT_NE(message.find("names checkpoint 'step_00000099', which does not exist"), std::string::npos) << message;
}

}  // namespace
}  // namespace retort::distill
