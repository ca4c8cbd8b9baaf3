#pragma once
// A private redis-server for the Redis rendezvous tests: on a free loopback port, no persistence, stopped with the
// object. Debian's redis-server is a test dependency (scripts/install-deps.sh); where it is missing the tests skip
// with the reason, and under CI they fail.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace retort::comm_testing {

inline bool redis_server_installed() {
  return std::system("command -v redis-server > /dev/null 2>&1") == 0;
}

// A port the kernel just handed out (bound and released): free unless another process takes it in the meantime.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

inline bool accepts_connections(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return ok;
}

class RedisServer {
 public:
  RedisServer() : port_(free_loopback_port()) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);  // its start-up banner and warnings are not the test's output
      ::dup2(null, 1);
      ::dup2(null, 2);
      const std::string port = std::to_string(port_);
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200 && !accepts_connections(port_); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ~RedisServer() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool running() const { return accepts_connections(port_); }
  int port() const { return port_; }
  // redis://127.0.0.1:PORT/PREFIX
  std::string url(const std::string& prefix) const {
    return "redis://127.0.0.1:" + std::to_string(port_) + "/" + prefix;
  }

 private:
  int port_;
  pid_t pid_ = -1;
};

}  // namespace retort::comm_testing
