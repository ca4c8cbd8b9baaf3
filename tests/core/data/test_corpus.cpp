// Corpus resolution (file, folder, glob, nothing matches, symlink dedupe, binary skip) and document splitting, of
// plain text and of JSON lines.
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

TEST(DataCorpusJsonl, EachLineIsOneDocumentVerbatim) {
  // Escapes decode (\n, \u00e9, \"), blank lines are skipped, other fields are ignored, and a text that is only
  // whitespace is dropped like an empty paragraph.
  const std::string text =
      "{\"text\": \"first line\\nsecond line\\n\", \"id\": 1}\r\n"
      "\n"
      "  {\"id\": 2, \"text\": \"caf\\u00e9 \\\"quoted\\\"\"}\n"
      "{\"text\": \"  \\n\"}\n"
      "{\"text\": \"no newline at the end\"}";
  const std::vector<std::string> expected{"first line\nsecond line\n", "caf\xc3\xa9 \"quoted\"",
                                          "no newline at the end"};
  EXPECT_EQ(split_jsonl_documents(text, "x.jsonl"), expected);
  // Another field by name.
  EXPECT_EQ(split_jsonl_documents("{\"body\": \"b\", \"text\": \"t\"}\n", "x.jsonl", "body"),
            std::vector<std::string>{"b"});
}

TEST(DataCorpusJsonl, BadLinesNameFileLineAndField) {
  const std::string good = "{\"text\": \"ok\"}\n";
  std::string message = message_of([&] { split_jsonl_documents(good + "\n{\"text\": \"cut", "c.jsonl"); });
  EXPECT_NE(message.find("c.jsonl:3 is not valid JSON"), std::string::npos) << message;
  message = message_of([&] { split_jsonl_documents(good + "{\"content\": \"x\"}\n", "c.jsonl"); });
  EXPECT_NE(message.find("c.jsonl:2 has no \"text\" field"), std::string::npos) << message;
  EXPECT_NE(message.find("data.text_field"), std::string::npos) << message;
  message = message_of([&] { split_jsonl_documents(good + "[\"text\"]\n", "c.jsonl"); });
  EXPECT_NE(message.find("c.jsonl:2 is a JSON array, not an object"), std::string::npos) << message;
  message = message_of([&] { split_jsonl_documents("{\"text\": 7}\n", "c.jsonl"); });
  EXPECT_NE(message.find("c.jsonl:1: field \"text\" is a JSON number, not a string"), std::string::npos) << message;
}

TEST(DataCorpusJsonl, ReadDocumentsMixesJsonlAndPlainTextByExtension) {
  TempFolder folder;
  write_bytes(folder.path() / "a.jsonl", "{\"text\": \"from json\"}\n{\"text\": \"two\\n\\nparagraphs\"}\n");
  write_bytes(folder.path() / "b.txt", "plain one\n\nplain two\n");
  // A .json file (not .jsonl) is plain text.
  write_bytes(folder.path() / "c.json", "{\"text\": \"x\"}\n");
  const std::vector<std::string> expected{"from json", "two\n\nparagraphs", "plain one\n", "plain two\n",
                                          "{\"text\": \"x\"}\n"};
  EXPECT_EQ(read_documents(resolve_corpus(folder.path().string())), expected);
  EXPECT_TRUE(is_jsonl_file("dir/x.jsonl"));
  EXPECT_FALSE(is_jsonl_file("dir/x.json"));
  // The file's path is in the message of a bad line.
  write_bytes(folder.path() / "a.jsonl", "{\"text\": \"ok\"}\nnot json\n");
  const std::string message = message_of([&] { read_documents(resolve_corpus(folder.path().string())); });
  EXPECT_NE(message.find((folder.path() / "a.jsonl").string() + ":2"), std::string::npos) << message;
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
