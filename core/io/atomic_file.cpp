#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <random>
#include <streambuf>

#include "core/util/error.h"

namespace retort {
namespace {

std::string errno_text(int error) {
  return std::strerror(error);
}

void write_all(int fd, const char* data, size_t size, const std::filesystem::path& shown_path) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("cannot write '{}': {}", shown_path.string(), errno_text(errno)));
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
}

// A buffered streambuf over a file descriptor, so the streaming writer can fsync the very descriptor it
// wrote through. Write errors throw from inside the stream calls (the stream's exception mask is set), so
// a failing disk cannot be mistaken for success.
class FdStreamBuf : public std::streambuf {
 public:
  FdStreamBuf(int fd, std::filesystem::path shown_path) : fd_(fd), shown_path_(std::move(shown_path)) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }

  void flush_buffer() {
    write_all(fd_, pbase(), static_cast<size_t>(pptr() - pbase()), shown_path_);
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }

 protected:
  int_type overflow(int_type ch) override {
    flush_buffer();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }

  std::streamsize xsputn(const char* data, std::streamsize count) override {
    // Large blocks (tensor payloads) bypass the buffer instead of being copied through it.
    if (count >= static_cast<std::streamsize>(buffer_.size())) {
      flush_buffer();
      write_all(fd_, data, static_cast<size_t>(count), shown_path_);
      return count;
    }
    return std::streambuf::xsputn(data, count);
  }

  int sync() override {
    flush_buffer();
    return 0;
  }

 private:
  int fd_;
  std::filesystem::path shown_path_;
  std::array<char, 1 << 16> buffer_{};
};

std::filesystem::path temporary_path_for(const std::filesystem::path& path) {
  std::random_device entropy;
  const uint64_t tag = (static_cast<uint64_t>(entropy()) << 32) | entropy();
  std::filesystem::path temp = path;
  temp += fmt::format(".tmp.{}.{:016x}", ::getpid(), tag);
  return temp;
}

void fsync_directory_of(const std::filesystem::path& path) {
  std::filesystem::path directory = path.parent_path();
  if (directory.empty()) directory = ".";
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(fmt::format("wrote '{}' but cannot open its directory to make the rename durable: {}", path.string(),
                            errno_text(errno)));
  }
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // Some filesystems cannot fsync a directory at all; that is a property of the filesystem, not a failure.
  if (result != 0 && error != EINVAL && error != ENOTSUP) {
    throw Error(fmt::format("wrote '{}' but fsync of its directory failed: {}", path.string(), errno_text(error)));
  }
}

// Owns the temporary file until commit(): destruction before commit removes it.
class TemporaryFile {
 public:
  explicit TemporaryFile(const std::filesystem::path& target) : target_(target), temp_(temporary_path_for(target)) {
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      throw Error(fmt::format("cannot write '{}': creating the temporary file '{}' failed: {}", target_.string(),
                              temp_.string(), errno_text(errno)));
    }
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }

  int fd() const { return fd_; }

  void commit() {
    if (::fsync(fd_) != 0) {
      throw Error(fmt::format("cannot write '{}': fsync failed: {}", target_.string(), errno_text(errno)));
    }
    const int closed = ::close(fd_);
    fd_ = -1;
    if (closed != 0) {
      throw Error(fmt::format("cannot write '{}': close failed: {}", target_.string(), errno_text(errno)));
    }
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
      throw Error(fmt::format("cannot write '{}': renaming the temporary file over it failed: {}", target_.string(),
                              errno_text(errno)));
    }
    committed_ = true;
    fsync_directory_of(target_);
  }

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  TemporaryFile file(path);
  write_all(file.fd(), bytes.data(), bytes.size(), path);
  file.commit();
}

void write_text_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path, text);
}

void write_file_atomic(const std::filesystem::path& path, const std::function<void(std::ostream&)>& produce) {
  TemporaryFile file(path);
  FdStreamBuf buffer(file.fd(), path);
  std::ostream stream(&buffer);
  // With badbit in the mask, the stream rethrows the streambuf's own Error, which names the path and errno.
  stream.exceptions(std::ios::badbit);
  produce(stream);
  RETORT_CHECK(!stream.fail(), "cannot write '{}': the output stream was left in a failed state", path.string());
  buffer.flush_buffer();
  file.commit();
}

std::string read_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) throw InputError(fmt::format("cannot read '{}': the file does not exist", path.string()));
    throw InputError(fmt::format("cannot read '{}': {}", path.string(), errno_text(error)));
  }
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    ::close(fd);
    throw InputError(fmt::format("cannot read '{}': it is a directory, not a file", path.string()));
  }
  std::string content;
  if (S_ISREG(info.st_mode)) content.reserve(static_cast<size_t>(info.st_size));
  std::array<char, 1 << 16> chunk{};
  for (;;) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      throw InputError(fmt::format("cannot read '{}': {}", path.string(), errno_text(error)));
    }
    if (got == 0) break;
    content.append(chunk.data(), static_cast<size_t>(got));
  }
  ::close(fd);
  return content;
}

}  // namespace retort
