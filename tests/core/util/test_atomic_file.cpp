// Atomic file writes: the target holds the old or the new content, never a mix, and no temporary file is
// left behind on failure.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort {
namespace {

using ::retort::testing::message_of;
using ::retort::testing::TempFolder;

class AtomicFileTest : public ::testing::Test {
 protected:
  // ReadOnlyDirectory takes away write permission; give it back so that folder_ can remove its contents.
  void TearDown() override {
    std::filesystem::permissions(folder_.path(), std::filesystem::perms::owner_all, std::filesystem::perm_options::add);
  }

  size_t entries() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(folder_.path()), {}));
  }

  TempFolder folder_;
};

TEST_F(AtomicFileTest, WritesAndReplaces) {
  const auto path = folder_.path() / "state.json";
  write_file_atomic(path, std::string_view("old"));
  EXPECT_EQ(read_file(path), "old");
  write_text_atomic(path, "new content\n");
  EXPECT_EQ(read_file(path), "new content\n");
  EXPECT_EQ(entries(), 1u);  // no temporaries left behind
}

TEST_F(AtomicFileTest, BinaryAndLargeStreamingWrites) {
  const auto path = folder_.path() / "blob.bin";
  std::string binary(3 << 20, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 7919 % 251);
  write_file_atomic(path, [&](std::ostream& out) {
    out << "head";
    out.write(binary.data(), static_cast<std::streamsize>(binary.size()));  // bypasses the buffer
    for (int i = 0; i < 1000; ++i) out.put(static_cast<char>(i));           // goes through it
  });
  const std::string content = read_file(path);
  ASSERT_EQ(content.size(), 4 + binary.size() + 1000);
  EXPECT_EQ(content.substr(0, 4), "head");
  EXPECT_EQ(content.substr(4, binary.size()), binary);
  EXPECT_EQ(static_cast<unsigned char>(content.back()), 999 % 256);
}

TEST_F(AtomicFileTest, FailingProducerLeavesTheOldContentAndNoTemporary) {
  const auto path = folder_.path() / "checkpoint.bin";
  write_text_atomic(path, "old");
  EXPECT_THROW(write_file_atomic(path,
                                 [](std::ostream& out) {
                                   out << std::string(1 << 20, 'x');
                                   throw InputError("producer failed half way");
                                 }),
               InputError);
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFileTest, MissingDirectoryNamesThePathAndReason) {
  const auto path = folder_.path() / "no" / "such" / "dir" / "file.txt";
  const std::string message = message_of<Error>([&] { write_text_atomic(path, "x"); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
  EXPECT_EQ(entries(), 0u);
}

TEST_F(AtomicFileTest, RenameFailureRemovesTheTemporary) {
  // A directory in the target's place makes the final rename fail after the data was written.
  const auto path = folder_.path() / "occupied";
  std::filesystem::create_directories(path / "child");
  const std::string message = message_of<Error>([&] { write_text_atomic(path, "data"); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("renaming"), std::string::npos) << message;
  EXPECT_EQ(entries(), 1u);
  EXPECT_TRUE(std::filesystem::is_directory(path));
}

TEST_F(AtomicFileTest, ReadOnlyDirectory) {
  const auto path = folder_.path() / "file.txt";
  write_text_atomic(path, "old");
  ::chmod(folder_.path().c_str(), 0555);
  if (::access(folder_.path().c_str(), W_OK) == 0) GTEST_SKIP() << "running as root: permissions are not enforced";
  EXPECT_THROW(write_text_atomic(path, "new"), Error);
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFileTest, ReadErrorsAreClear) {
  EXPECT_NE(message_of([&] { read_file(folder_.path() / "absent.txt"); }).find("absent.txt': the file does not exist"),
            std::string::npos);
  EXPECT_NE(message_of([&] { read_file(folder_.path()); }).find("is a directory"), std::string::npos);
  write_text_atomic(folder_.path() / "empty", "");
  EXPECT_EQ(read_file(folder_.path() / "empty"), "");
}

}  // namespace
}  // namespace retort
