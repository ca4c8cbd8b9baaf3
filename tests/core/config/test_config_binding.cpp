// ConfigBinding: every field type read from its key, unbound fields left alone, and a key bound to a field of
// another type is the getter's error, not a silent conversion.
#include <gtest/gtest.h>

#include "core/config/config.h"
#include "core/config/config_binding.h"
#include "core/util/error.h"

namespace retort {
namespace {

struct Settings {
  int64_t layers = 0;
  uint64_t seed = 0;
  double rate = 0;
  bool flag = false;
  std::string name;
  std::filesystem::path folder;
  int64_t untouched = 42;
};

ResolvedConfig resolved(const std::vector<std::string>& overrides) {
  ConfigSchema schema;
  schema.add_int("model.layers", 2, "");
  schema.add_int("run.seed", 7, "");
  schema.add_float("optim.rate", 0.5, "");
  schema.add_bool("train.flag", false, "");
  schema.add_string("run.name", "a", "");
  schema.add_string("run.folder", "runs/a", "");
  Config config;
  config.apply_overrides(overrides);
  return config.resolve(schema);
}

TEST(ConfigBinding, EveryFieldTypeIsReadFromItsKey) {
  const ConfigBinding<Settings> binding{{"model.layers", &Settings::layers}, {"run.seed", &Settings::seed},
                                        {"optim.rate", &Settings::rate},     {"train.flag", &Settings::flag},
                                        {"run.name", &Settings::name},       {"run.folder", &Settings::folder}};
  const Settings s = binding.read(resolved({"model.layers=12", "run.seed=123456789012", "optim.rate=0.25",
                                            "train.flag=true", "run.name=big", "run.folder=/tmp/x y"}));
  EXPECT_EQ(s.layers, 12);
  EXPECT_EQ(s.seed, 123456789012u);
  EXPECT_EQ(s.rate, 0.25);
  EXPECT_TRUE(s.flag);
  EXPECT_EQ(s.name, "big");
  EXPECT_EQ(s.folder, std::filesystem::path("/tmp/x y"));
  EXPECT_EQ(s.untouched, 42);

  const Settings defaults = binding.read(resolved({}));
  EXPECT_EQ(defaults.layers, 2);
  EXPECT_EQ(defaults.seed, 7u);
  EXPECT_EQ(defaults.name, "a");
}

TEST(ConfigBinding, AKeyOfAnotherTypeIsAnError) {
  const ConfigBinding<Settings> wrong{{"run.name", &Settings::layers}};
  EXPECT_ANY_THROW(wrong.read(resolved({})));
}

}  // namespace
}  // namespace retort
