// The saved vocabulary projection: a round trip gives the same matrix and flags; a flipped byte anywhere, a file for
// another tokenizer pair, other models or other options, and something that is no projection are refused with the
// file named and the fix; load_or_build_projection builds once, then reuses, and rebuilds a bad file only when told.
#include <gtest/gtest.h>

#include "core/data/tokenizer.h"
#include "distill/xtoken/vocab_projection.h"
#include "distill/xtoken/vocab_projection_file.h"
#include "tests/distill/xtoken/projection_test_tokenizers.h"
#include "tests/test_support.h"

namespace retort::distill::xtoken {
namespace {

namespace fs = std::filesystem;
using ::retort::testing::message_of;
using ::retort::testing::read_bytes;
using ::retort::testing::TempFolder;
using ::retort::testing::write_bytes;
using testing::write_bpe_tokenizer;

class ProjectionFile : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(folder_.path() / "teacher");
    fs::create_directories(folder_.path() / "student");
    fs::create_directories(folder_.path() / "other");
    teacher_.emplace(data::Tokenizer::load(
        write_bpe_tokenizer(folder_.path() / "teacher", {{"h", "e"}, {"l", "l"}, {"he", "ll"}}, {{"<|endoftext|>"}})));
    student_.emplace(data::Tokenizer::load(write_bpe_tokenizer(
        folder_.path() / "student", {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"a", "b"}, {"ab", "c"}},
        {{"<|endoftext|>"}})));
    other_.emplace(data::Tokenizer::load(
        write_bpe_tokenizer(folder_.path() / "other", {{"h", "e"}, {"a", "b"}}, {{"<|endoftext|>"}})));
    path_ = folder_.path() / "cache" / kVocabProjectionFile;
  }
  ProjectionIdentity identity() const { return projection_identity(*student_, *teacher_, 266, 262); }

  TempFolder folder_;
  std::optional<data::Tokenizer> teacher_, student_, other_;
  fs::path path_;
};

void expect_same(const StudentTeacherProjection& a, const StudentTeacherProjection& b) {
  EXPECT_EQ(a.matrix.student_vocab, b.matrix.student_vocab);
  EXPECT_EQ(a.matrix.teacher_vocab, b.matrix.teacher_vocab);
  EXPECT_EQ(a.matrix.row_offsets.to_ints(), b.matrix.row_offsets.to_ints());
  EXPECT_EQ(a.matrix.teacher_ids.to_ints(), b.matrix.teacher_ids.to_ints());
  EXPECT_EQ(a.matrix.weights.to_floats(), b.matrix.weights.to_floats());
  EXPECT_EQ(a.exact, b.exact);
  EXPECT_EQ(a.canonical, b.canonical);
  EXPECT_EQ(a.report.exact_rows, b.report.exact_rows);
  EXPECT_EQ(a.report.reencoded_rows, b.report.reencoded_rows);
  EXPECT_EQ(a.report.empty_rows, b.report.empty_rows);
  EXPECT_DOUBLE_EQ(a.report.exact_share, b.report.exact_share);
  EXPECT_DOUBLE_EQ(a.report.mean_pieces, b.report.mean_pieces);
}

TEST_F(ProjectionFile, RoundTripGivesTheSameProjection) {
  const StudentTeacherProjection built = build_vocab_projection(*student_, *teacher_, 266, 262);
  save_projection(built, path_);
  ASSERT_TRUE(fs::is_regular_file(path_));
  EXPECT_EQ(read_bytes(path_).substr(0, 8), "RTVPROJ\n");
  const StudentTeacherProjection loaded = load_projection(path_, identity());
  expect_same(loaded, built);
  EXPECT_TRUE(loaded.report.loaded);
  // Only the file is left in the folder: the write was atomic.
  EXPECT_EQ(std::distance(fs::directory_iterator(path_.parent_path()), fs::directory_iterator()), 1);
}

TEST_F(ProjectionFile, AFlippedByteAnywhereIsRefused) {
  save_projection(build_vocab_projection(*student_, *teacher_, 266, 262), path_);
  const std::string good = read_bytes(path_);
  // In the header's length, the header, the payload (offsets, ids, weights, flags) and the trailer.
  for (const size_t at :
       {size_t{9}, size_t{40}, good.size() / 2, good.size() - 300, good.size() - 30, good.size() - 3}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    write_bytes(path_, bad);
    const std::string message = message_of([&] { load_projection(path_, identity()); });
    EXPECT_NE(message.find("the vocabulary projection '" + path_.string() + "' is damaged"), std::string::npos)
        << "byte " << at << ": " << message;
    EXPECT_NE(message.find("delete '" + path_.string() + "' to rebuild it"), std::string::npos) << message;
  }
  // A truncated file, and something else entirely.
  write_bytes(path_, good.substr(0, good.size() - 100));
  EXPECT_NE(message_of([&] { load_projection(path_, identity()); }).find("is damaged"), std::string::npos);
  write_bytes(path_, "not a projection at all, but long enough to have a trailer");
  EXPECT_NE(message_of([&] { load_projection(path_, identity()); }).find("is not a vocabulary projection file"),
            std::string::npos);
}

TEST_F(ProjectionFile, AFileForAnotherPairModelOrOptionsIsRefused) {
  save_projection(build_vocab_projection(*student_, *teacher_, 266, 262), path_);
  // Another teacher tokenizer.
  std::string message = message_of([&] { load_projection(path_, projection_identity(*student_, *other_, 266, 262)); });
  EXPECT_NE(message.find("the vocabulary projection '" + path_.string() + "' was made for another tokenizer pair"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("the teacher tokenizer_fingerprint is \"" + teacher_->fingerprint() + "\" in the file, \"" +
                         other_->fingerprint() + "\" here"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("delete '" + path_.string() + "' to rebuild it"), std::string::npos) << message;
  // The same tokenizers the other way round.
  message = message_of([&] { load_projection(path_, projection_identity(*teacher_, *student_, 262, 266)); });
  EXPECT_NE(message.find("the student tokenizer_fingerprint"), std::string::npos) << message;
  // Another model vocabulary.
  message = message_of([&] { load_projection(path_, projection_identity(*student_, *teacher_, 270, 262)); });
  EXPECT_NE(message.find("the student model_vocab is 266 in the file, 270 here"), std::string::npos) << message;
  // Other options.
  ProjectionOptions reverse;
  reverse.reverse_pass = true;
  message = message_of([&] { load_projection(path_, identity(), reverse); });
  EXPECT_NE(message.find("option reverse_pass is false in the file, true here"), std::string::npos) << message;
}

TEST_F(ProjectionFile, LoadOrBuildBuildsOnceThenReusesAndRebuildsABadFileOnlyWhenTold) {
  const StudentTeacherProjection first = load_or_build_projection(*student_, *teacher_, 266, 262, path_);
  EXPECT_FALSE(first.report.loaded);
  ASSERT_TRUE(fs::is_regular_file(path_));
  const std::string bytes = read_bytes(path_);
  const StudentTeacherProjection second = load_or_build_projection(*student_, *teacher_, 266, 262, path_);
  EXPECT_TRUE(second.report.loaded);
  expect_same(second, first);
  EXPECT_EQ(read_bytes(path_), bytes);

  // A damaged file: refused by default, rebuilt when asked.
  std::string bad = bytes;
  bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 1);
  write_bytes(path_, bad);
  EXPECT_NE(message_of([&] { load_or_build_projection(*student_, *teacher_, 266, 262, path_); }).find("is damaged"),
            std::string::npos);
  const StudentTeacherProjection rebuilt =
      load_or_build_projection(*student_, *teacher_, 266, 262, path_, {}, InvalidProjectionFile::kRebuild);
  EXPECT_FALSE(rebuilt.report.loaded);
  expect_same(rebuilt, first);
  EXPECT_TRUE(load_or_build_projection(*student_, *teacher_, 266, 262, path_).report.loaded);

  // A file for another pair: refused by default.
  const std::string message = message_of([&] { load_or_build_projection(*student_, *other_, 266, 262, path_); });
  EXPECT_NE(message.find("was made for another tokenizer pair"), std::string::npos) << message;
}

}  // namespace
}  // namespace retort::distill::xtoken
