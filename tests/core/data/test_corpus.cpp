// Corpus resolution (file, folder, glob, nothing matches, symlink dedupe, binary skip) and document splitting.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/data/corpus.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort::data {
namespace {
namespace fs = std::filesystem;
using ::retort::testing::message_of;
using ::retort::testing::TempFolder;
using ::retort::testing::write_bytes;

// tree/
//   one.txt, one.txt.u8 -> one.txt (fortune's layout), index.dat (binary), sub/two.txt, .hidden/three.txt
class DataCorpusTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = folder_.path() / "tree";
    write_bytes(root_ / "one.txt", "first\n%\nsecond\n");
    fs::create_symlink("one.txt", root_ / "one.txt.u8");
    write_bytes(root_ / "index.dat", std::string("\x00\x00\x00\x02\x00\x00\x00\x03", 8));
    write_bytes(root_ / "sub" / "two.txt", "paragraph\n");
    write_bytes(root_ / ".hidden" / "three.txt", "hidden\n");
  }
  TempFolder folder_;
  fs::path root_;
};

TEST_F(DataCorpusTree, FileResolvesToItself) {
  EXPECT_EQ(resolve_corpus((root_ / "one.txt").string()), std::vector<fs::path>{root_ / "one.txt"});
  // A symlink resolves to its target's canonical path.
  EXPECT_EQ(resolve_corpus((root_ / "one.txt.u8").string()), std::vector<fs::path>{root_ / "one.txt"});
}

TEST_F(DataCorpusTree, FolderIsRecursiveSortedAndDeduplicated) {
  const std::vector<fs::path> expected{root_ / "one.txt", root_ / "sub" / "two.txt"};
  EXPECT_EQ(resolve_corpus(root_.string()), expected);
}

TEST_F(DataCorpusTree, GlobMatchesFilesAndExpandsFolders) {
  EXPECT_EQ(resolve_corpus((root_ / "*.txt").string()), std::vector<fs::path>{root_ / "one.txt"});
  const std::vector<fs::path> everything{root_ / "one.txt", root_ / "sub" / "two.txt"};
  EXPECT_EQ(resolve_corpus((root_ / "*").string()), everything);
  EXPECT_EQ(resolve_corpus((root_ / "s?b").string()), std::vector<fs::path>{root_ / "sub" / "two.txt"});
}

TEST_F(DataCorpusTree, NothingMatchingIsAnErrorNamingTheSpec) {
  const std::string pattern = (root_ / "*.md").string();
  const std::string message = message_of([&] { resolve_corpus(pattern); });
  EXPECT_NE(message.find(pattern), std::string::npos) << message;
  EXPECT_NE(message.find("matched no text files"), std::string::npos) << message;

  const std::string missing = (root_ / "missing.txt").string();
  const std::string missing_message = message_of([&] { resolve_corpus(missing); });
  EXPECT_NE(missing_message.find(missing), std::string::npos) << missing_message;
  EXPECT_NE(missing_message.find("does not exist"), std::string::npos) << missing_message;

  // Only binary files: nothing usable.
  EXPECT_THROW(resolve_corpus((root_ / "*.dat").string()), InputError);
  EXPECT_THROW(resolve_corpus(""), InputError);
}

TEST_F(DataCorpusTree, ExplicitBinaryFileIsAnError) {
  EXPECT_TRUE(is_binary_file(root_ / "index.dat"));
  EXPECT_FALSE(is_binary_file(root_ / "one.txt"));
  const std::string message = message_of([&] { resolve_corpus((root_ / "index.dat").string()); });
  EXPECT_NE(message.find("binary"), std::string::npos) << message;
}

TEST(DataCorpus, FortuneEntriesAreDocuments) {
  const std::string text = "A fortune\n  with an indented line\n%\nsecond\n\nwith a blank line\n%\n%\n  \n%\nlast";
  const std::vector<std::string> expected{"A fortune\n  with an indented line\n", "second\n\nwith a blank line\n",
                                          "last\n"};
  EXPECT_EQ(split_documents(text), expected);
  // Windows line ends still separate entries.
  EXPECT_EQ(split_documents("a\r\n%\r\nb\r\n"), (std::vector<std::string>{"a\r\n", "b\r\n"}));
}

TEST(DataCorpus, PlainTextSplitsOnBlankLines) {
  const std::string text = "\n\nPara one,\nline two.\n\n\n \nPara two.\n\t\nPara three";
  const std::vector<std::string> expected{"Para one,\nline two.\n", "Para two.\n", "Para three\n"};
  EXPECT_EQ(split_documents(text), expected);
  EXPECT_TRUE(split_documents("").empty());
  EXPECT_TRUE(split_documents("\n \n\t\n").empty());
  // A "%" inside a line does not make a fortune file.
  EXPECT_EQ(split_documents("100% sure\nyes\n"), (std::vector<std::string>{"100% sure\nyes\n"}));
}

TEST_F(DataCorpusTree, ReadDocumentsFollowsFileOrder) {
  const std::vector<std::string> expected{"first\n", "second\n", "paragraph\n"};
  EXPECT_EQ(read_documents(resolve_corpus(root_.string())), expected);
}

TEST(DataCorpus, DebianFortunesResolveToTheirTextFiles) {
  if (!fs::is_directory(kDefaultCorpus)) GTEST_SKIP() << "Debian's fortunes package is not installed";
  // Independent expectation: the regular (non-symlink) files that are not .dat indexes.
  std::vector<fs::path> expected;
  for (const auto& entry : fs::directory_iterator(kDefaultCorpus)) {
    if (entry.is_symlink() || !entry.is_regular_file() || entry.path().extension() == ".dat") continue;
    expected.push_back(fs::canonical(entry.path()));
  }
  std::sort(expected.begin(), expected.end());
  const std::vector<fs::path> files = resolve_corpus(kDefaultCorpus);
  EXPECT_EQ(files, expected);
  EXPECT_GT(files.size(), 20u);
  const std::vector<std::string> documents = read_documents(files);
  EXPECT_GT(documents.size(), 10000u);
  for (const std::string& document : documents) {
    ASSERT_EQ(document.back(), '\n');
    ASSERT_EQ(document.find("\n%\n"), std::string::npos);
  }
}

}  // namespace
}  // namespace retort::data
