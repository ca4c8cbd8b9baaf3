// A flag that is really a config key gets the override the user meant; anything else gets no hint.
#include <gtest/gtest.h>

#include "core/config/flag_hint.h"

namespace retort {
namespace {

ConfigSchema schema() {
  ConfigSchema s;
  s.add_int("train.steps", 100, "optimizer steps");
  s.add_int("teacher.steps", 100, "the teacher's steps");
  s.add_int("train.batch_size", 8, "sequences per batch");
  s.add_string("run.dir", "runs/x", "run folder");
  return s;
}

TEST(FlagHint, TheLastPartOfAKeyNamesEveryKeyItCouldMean) {
  const std::string hint = config_key_hint(schema(), "--steps");
  EXPECT_NE(hint.find("train.steps=VALUE or teacher.steps=VALUE"), std::string::npos) << hint;
  EXPECT_TRUE(hint.starts_with("--steps is not an option")) << hint;
}

TEST(FlagHint, DashesAreUnderscoresAndAValueIsKept) {
  const std::string hint = config_key_hint(schema(), "--batch-size=4");
  EXPECT_NE(hint.find("train.batch_size=4"), std::string::npos) << hint;
  EXPECT_TRUE(hint.starts_with("--batch-size is")) << hint;
  EXPECT_NE(config_key_hint(schema(), "--run.dir=out").find("run.dir=out"), std::string::npos);
}

TEST(FlagHint, NoHintForWhatIsNotAKey) {
  EXPECT_EQ(config_key_hint(schema(), "--nothing"), "");
  EXPECT_EQ(config_key_hint(schema(), "steps"), "");  // a positional word, not a flag
  EXPECT_EQ(config_key_hint(schema(), "--"), "");
  EXPECT_EQ(config_key_hint(schema(), "--dir.x"), "");
}

}  // namespace
}  // namespace retort
