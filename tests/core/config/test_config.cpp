// Config: schema defaults, file + override precedence, nested keys, every error kind, and the resolved dump.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/config/config.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort {
namespace {

using ::retort::testing::message_of;
using ::retort::testing::TempFolder;
using ::retort::testing::write_bytes;

ConfigSchema make_schema() {
  ConfigSchema schema;
  schema.add_int("model.n_layer", 12, "transformer blocks").range(1, 1024);
  schema.add_int("model.n_head", 4, "attention heads").min(1);
  schema.add_int("model.n_embd", 256, "embedding width").min(1);
  schema.add_float("optim.lr", 3e-4, "peak learning rate").greater_than(0);
  schema.add_string("optim.name", "adamw", "optimizer").choices({"adamw", "rekls", "tp_rekls"});
  schema.add_bool("train.compile", false, "fuse kernels");
  schema.add_string("train.out_dir", "runs/default", "run directory");
  schema.add_int_list("parallel.grid", {1, 1}, "tp x dp")
      .check(
          [](const ConfigValue& value) {
            return std::get<std::vector<int64_t>>(value).size() == 2 ? std::string()
                                                                     : std::string("must have 2 entries");
          },
          "2 entries");
  schema.add_float_list("optim.betas", {0.9, 0.95}, "Adam betas").range(0, 1);
  schema.add_string_list("data.splits", {"train", "val"}, "split names");
  schema.add_float("a.b.c.d.weight", 0.5, "a deeply nested key");
  schema.add_check([](const ResolvedConfig& config) {
    return config.get_int("model.n_embd") % config.get_int("model.n_head") == 0
               ? std::string()
               : std::string("model.n_embd must be a multiple of model.n_head");
  });
  return schema;
}

class ConfigFileTest : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& name, const std::string& text) {
    const auto path = folder_.path() / name;
    write_bytes(path, text);
    return path;
  }

  TempFolder folder_;
};

TEST(ConfigDefaults, EmptyConfigTakesEveryDefault) {
  const ResolvedConfig config = Config().resolve(make_schema());
  EXPECT_EQ(config.get_int("model.n_layer"), 12);
  EXPECT_DOUBLE_EQ(config.get_double("optim.lr"), 3e-4);
  EXPECT_EQ(config.get_string("optim.name"), "adamw");
  EXPECT_FALSE(config.get_bool("train.compile"));
  EXPECT_EQ(config.get_int_list("parallel.grid"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(config.get_double_list("optim.betas"), (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(config.get_string_list("data.splits"), (std::vector<std::string>{"train", "val"}));
  EXPECT_TRUE(config.is_default("model.n_layer"));
}

TEST(ConfigDefaults, UndeclaredKeyOrWrongGetterIsAProgrammingError) {
  const ResolvedConfig config = Config().resolve(make_schema());
  EXPECT_THROW(config.get_int("model.n_layers"), Error);
  EXPECT_THROW(config.get_double("model.n_layer"), Error);
  // A programming error is not the user's fault, so it must not masquerade as an InputError.
  try {
    config.get_string("model.n_layer");
    FAIL();
  } catch (const InputError&) {
    FAIL() << "wrong-typed getter reported as an input error";
  } catch (const Error&) {
  }
}

TEST_F(ConfigFileTest, FileThenOverridesInOrder) {
  const auto path = write("run.yaml", R"(
model:
  n_layer: 6
  n_head: 8
optim:
  lr: 1e-3
  name: rekls
train:
  compile: yes
)");
  Config config = Config::load(path);
  config.apply_overrides({"model.n_layer=3", "optim.lr=2.5e-4", "model.n_layer=5", "train.out_dir=/tmp/a: b"});
  const ResolvedConfig resolved = config.resolve(make_schema());
  EXPECT_EQ(resolved.get_int("model.n_layer"), 5);  // the last override wins
  EXPECT_EQ(resolved.get_int("model.n_head"), 8);   // from the file
  EXPECT_DOUBLE_EQ(resolved.get_double("optim.lr"), 2.5e-4);
  EXPECT_EQ(resolved.get_string("optim.name"), "rekls");
  EXPECT_TRUE(resolved.get_bool("train.compile"));
  EXPECT_EQ(resolved.get_string("train.out_dir"), "/tmp/a: b");  // not YAML, taken as typed
  EXPECT_EQ(resolved.get_int("model.n_embd"), 256);              // default
  EXPECT_EQ(resolved.origin("model.n_head"), path.string() + ":4");
  EXPECT_EQ(resolved.origin("model.n_layer"), "override 'model.n_layer=5'");
  EXPECT_EQ(resolved.origin("model.n_embd"), "default");
}

TEST(ConfigNested, DeepKeysDottedKeysAndListOverrides) {
  Config config = Config::from_string(R"(
a:
  b:
    c.d:
      weight: 0.25
model.n_layer: 2
parallel: {grid: [2, 4]}
)");
  config.apply_overrides({"optim.betas=[0.8, 0.99]", "data.splits=[a, 'b c']"});
  const ResolvedConfig resolved = config.resolve(make_schema());
  EXPECT_DOUBLE_EQ(resolved.get_double("a.b.c.d.weight"), 0.25);
  EXPECT_EQ(resolved.get_int("model.n_layer"), 2);
  EXPECT_EQ(resolved.get_int_list("parallel.grid"), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(resolved.get_double_list("optim.betas"), (std::vector<double>{0.8, 0.99}));
  EXPECT_EQ(resolved.get_string_list("data.splits"), (std::vector<std::string>{"a", "b c"}));
}

TEST(ConfigNested, SectionOverrideWithAMapping) {
  Config config;
  config.apply_override("model={n_layer: 7, n_head: 2}");
  const ResolvedConfig resolved = config.resolve(make_schema());
  EXPECT_EQ(resolved.get_int("model.n_layer"), 7);
  EXPECT_EQ(resolved.get_int("model.n_head"), 2);
}

TEST_F(ConfigFileTest, UnknownKeyInFileNamesKeyFileAndLine) {
  const auto path = write("typo.yaml", "model:\n  n_layer: 2\n  n_layr: 3\n");
  const std::string message = message_of([&] { Config::load(path).resolve(make_schema()); });
  EXPECT_NE(message.find("unknown config key 'model.n_layr'"), std::string::npos) << message;
  EXPECT_NE(message.find(path.string() + ":3"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'model.n_layer'?"), std::string::npos) << message;
}

TEST(ConfigErrors, UnknownSectionAnywhereInTheTree) {
  const std::string message = message_of([] { Config::from_string("modle:\n  n_layer: 2\n").resolve(make_schema()); });
  EXPECT_NE(message.find("unknown config key 'modle'"), std::string::npos) << message;
}

TEST(ConfigErrors, UnknownOverrideSuggestsTheClosestKey) {
  Config config;
  config.apply_overrides({"model.n_layr=4"});
  const std::string message = message_of([&] { config.resolve(make_schema()); });
  EXPECT_NE(message.find("unknown config key 'model.n_layr'"), std::string::npos) << message;
  EXPECT_NE(message.find("override 'model.n_layr=4'"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'model.n_layer'?"), std::string::npos) << message;

  Config leaf_only;
  leaf_only.apply_override("n_layer=4");
  EXPECT_NE(message_of([&] { leaf_only.resolve(make_schema()); }).find("did you mean 'model.n_layer'?"),
            std::string::npos);

  Config hopeless;
  hopeless.apply_override("zzzzzzzz=1");
  EXPECT_EQ(message_of([&] { hopeless.resolve(make_schema()); }).find("did you mean"), std::string::npos);
}

TEST(ConfigErrors, OverrideWithoutEquals) {
  Config config;
  const std::string message = message_of([&] { config.apply_overrides({"model.n_layer"}); });
  EXPECT_NE(message.find("'model.n_layer' has no '='"), std::string::npos) << message;
  EXPECT_NE(message_of([&] { config.apply_override("=4"); }).find("no key"), std::string::npos);
  EXPECT_NE(message_of([&] { config.apply_override("+model.x=4"); }).find("not supported"), std::string::npos);
}

TEST(ConfigErrors, WrongTypesNameTheKeyAndValue) {
  const auto message_for = [](const std::string& text) {
    Config config;
    config.apply_override(text);
    return message_of([&] { config.resolve(make_schema()); });
  };
  EXPECT_NE(message_for("model.n_layer=abc").find("config key 'model.n_layer' must be an integer, got 'abc'"),
            std::string::npos);
  EXPECT_NE(message_for("model.n_layer=4.5").find("must be an integer, got '4.5'"), std::string::npos);
  EXPECT_NE(message_for("model.n_layer=").find("must be an integer, got an empty value"), std::string::npos);
  EXPECT_NE(message_for("optim.lr=fast").find("config key 'optim.lr' must be a number, got 'fast'"), std::string::npos);
  EXPECT_NE(message_for("train.compile=maybe").find("config key 'train.compile' must be a boolean"), std::string::npos);
  EXPECT_NE(message_for("parallel.grid=3").find("config key 'parallel.grid' must be a list of integers, got '3'"),
            std::string::npos);
  EXPECT_NE(message_for("parallel.grid=[1, x]").find("got 'x' at index 1"), std::string::npos);
  EXPECT_NE(message_for("model=3").find("'model' is a section"), std::string::npos);

  const std::string from_file =
      message_of([] { Config::from_string("model:\n  n_layer: abc\n").resolve(make_schema()); });
  EXPECT_NE(from_file.find("config key 'model.n_layer' must be an integer, got 'abc' (<string>:2)"), std::string::npos)
      << from_file;
}

TEST(ConfigErrors, OutOfRangeBadChoiceAndCustomChecks) {
  const auto message_for = [](const std::vector<std::string>& overrides) {
    Config config;
    config.apply_overrides(overrides);
    return message_of([&] { config.resolve(make_schema()); });
  };
  EXPECT_NE(message_for({"model.n_layer=0"}).find("config key 'model.n_layer' must be in [1, 1024], got 0"),
            std::string::npos);
  EXPECT_NE(message_for({"optim.lr=0"}).find("config key 'optim.lr' must be > 0, got 0.0"), std::string::npos);
  EXPECT_NE(message_for({"optim.betas=[0.9, 1.5]"}).find("must be in [0, 1], got 1.5"), std::string::npos);
  const std::string choice = message_for({"optim.name=sgd"});
  EXPECT_NE(choice.find("config key 'optim.name' must be one of: adamw, rekls, tp_rekls; got 'sgd'"), std::string::npos)
      << choice;
  EXPECT_NE(message_for({"parallel.grid=[1, 2, 3]"}).find("config key 'parallel.grid' must have 2 entries"),
            std::string::npos);
  EXPECT_NE(message_for({"model.n_head=3"}).find("model.n_embd must be a multiple of model.n_head"), std::string::npos);
}

TEST(ConfigErrors, AllProblemsAreReportedTogether) {
  Config config = Config::from_string("model:\n  n_layer: 0\n  bogus: 1\n");
  config.apply_override("optim.name=sgd");
  const std::string message = message_of([&] { config.resolve(make_schema()); });
  EXPECT_NE(message.find("3 problems"), std::string::npos) << message;
  EXPECT_NE(message.find("model.n_layer"), std::string::npos);
  EXPECT_NE(message.find("model.bogus"), std::string::npos);
  EXPECT_NE(message.find("optim.name"), std::string::npos);
}

TEST(ConfigErrors, DuplicateKeyAndRequiredKey) {
  EXPECT_NE(message_of([] {
              Config::from_string("model:\n  n_layer: 2\nmodel.n_layer: 3\n").resolve(make_schema());
            }).find("'model.n_layer' is set twice"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              Config::from_string("model:\n  n_layer: 2\n  n_layer: 3\n").resolve(make_schema());
            }).find("'model.n_layer' is set twice (<string>:3)"),
            std::string::npos);
  ConfigSchema schema;
  schema.add_string("data.train", "", "training shards").required();
  EXPECT_NE(message_of([&] { Config().resolve(schema); }).find("config key 'data.train' (training shards) is required"),
            std::string::npos);
  Config given;
  given.apply_override("data.train=shards/*.bin");
  EXPECT_EQ(given.resolve(schema).get_string("data.train"), "shards/*.bin");
}

TEST_F(ConfigFileTest, BadYamlAndMissingFile) {
  const auto path = write("broken.yaml", "model:\n  n_layer: [1, 2\n");
  const std::string message = message_of([&] { Config::load(path); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("line"), std::string::npos) << message;
  EXPECT_NE(message_of([&] { Config::load(folder_.path() / "missing.yaml"); }).find("missing.yaml"), std::string::npos);
  EXPECT_NE(message_of([&] { Config::from_string("- 1\n- 2\n"); }).find("mapping"), std::string::npos);
}

TEST(ConfigSchemaDeclaration, MistakesInTheSchemaAreProgrammingErrors) {
  ConfigSchema schema;
  schema.add_int("model.n_layer", 1, "x");
  EXPECT_THROW(schema.add_int("model.n_layer", 1, "again"), Error);
  EXPECT_THROW(schema.add_int("model", 1, "a section already"), Error);
  EXPECT_THROW(schema.add_int("model.n_layer.sub", 1, "under a leaf"), Error);
  EXPECT_THROW(schema.add_int("bad..key", 1, "empty component"), Error);
  EXPECT_THROW(schema.add_int("x", 1, "x").choices({"a"}), Error);
  schema.add_int("y", 0, "default out of its own range").min(1);
  EXPECT_THROW(Config().resolve(schema), Error);
}

TEST(ConfigDump, ToYamlRoundTripsEveryValueExactly) {
  Config config;
  config.apply_overrides({"optim.lr=0.1", "model.n_layer=7", "optim.name=rekls", "train.out_dir=true",
                          "data.splits=['~', '', '12']", "a.b.c.d.weight=1e-300", "optim.betas=[0.1, 0.2]"});
  const ResolvedConfig first = config.resolve(make_schema());
  const std::string dumped = first.to_yaml();
  const ResolvedConfig second = Config::from_string(dumped, "dump").resolve(make_schema());
  const ConfigSchema schema = make_schema();
  for (const ConfigEntry& entry : schema.entries()) {
    EXPECT_EQ(first.get(entry.key), second.get(entry.key)) << entry.key << "\n" << dumped;
  }
  EXPECT_EQ(second.get_string("train.out_dir"), "true");
  EXPECT_EQ(second.get_string_list("data.splits"), (std::vector<std::string>{"~", "", "12"}));
  // Nested, in declaration order.
  EXPECT_LT(dumped.find("model:"), dumped.find("optim:"));
  EXPECT_NE(dumped.find("  n_layer: 7"), std::string::npos) << dumped;
  // With descriptions it is still loadable YAML.
  const std::string commented = first.to_yaml(/*with_descriptions=*/true);
  EXPECT_NE(commented.find("# transformer blocks"), std::string::npos) << commented;
  EXPECT_EQ(Config::from_string(commented).resolve(make_schema()).get_int("model.n_layer"), 7);
}

TEST(ConfigDump, DescribeListsEveryKeyWithDefaultAndDescription) {
  const std::string text = make_schema().describe();
  EXPECT_NE(text.find("model.n_layer"), std::string::npos);
  EXPECT_NE(text.find("transformer blocks (in [1, 1024])"), std::string::npos) << text;
  EXPECT_NE(text.find("one of: adamw, rekls, tp_rekls"), std::string::npos);
  EXPECT_NE(text.find("0.0003"), std::string::npos);
  EXPECT_NE(text.find("list[int]"), std::string::npos);
  EXPECT_NE(text.find("a deeply nested key"), std::string::npos);
}

TEST(ConfigValues, ScalarParsingIsStrict) {
  EXPECT_EQ(std::get<int64_t>(parse_config_scalar("-42", ConfigType::Int)), -42);
  EXPECT_EQ(std::get<int64_t>(parse_config_scalar("+7", ConfigType::Int)), 7);
  EXPECT_THROW(parse_config_scalar("1e3", ConfigType::Int), ConfigValueError);
  EXPECT_THROW(parse_config_scalar("99999999999999999999", ConfigType::Int), ConfigValueError);
  EXPECT_DOUBLE_EQ(std::get<double>(parse_config_scalar("3e-4", ConfigType::Float)), 3e-4);
  EXPECT_TRUE(std::isinf(std::get<double>(parse_config_scalar(".inf", ConfigType::Float))));
  EXPECT_THROW(parse_config_scalar("1.0x", ConfigType::Float), ConfigValueError);
  EXPECT_TRUE(std::get<bool>(parse_config_scalar("On", ConfigType::Bool)));
  EXPECT_FALSE(std::get<bool>(parse_config_scalar("false", ConfigType::Bool)));
  EXPECT_THROW(parse_config_scalar("1", ConfigType::Bool), ConfigValueError);
  EXPECT_EQ(format_config_double(0.1), "0.1");
  EXPECT_EQ(format_config_double(3.0), "3.0");
  EXPECT_EQ(format_config_double(-INFINITY), "-.inf");
}

}  // namespace
}  // namespace retort
