#include "parallel/comm/redis_rendezvous.h"

#include <fmt/format.h>

#include <charconv>

#include "core/util/error.h"

// Debian's hiredis installs its header as <hiredis/hiredis.h>.
#define HIREDIS_NESTED_INCLUDE 1
#include <gloo/rendezvous/redis_store.h>

namespace retort {

namespace {

constexpr std::string_view kScheme = "redis://";

// The Redis store with every key under "PREFIX/", and errors that name the server and the prefix.
class PrefixedRedisStore final : public gloo::rendezvous::Store {
 public:
  explicit PrefixedRedisStore(RedisAddress address) : address_(std::move(address)) {
    try {
      redis_ = std::make_unique<gloo::rendezvous::RedisStore>(address_.host, address_.port);
    } catch (const std::exception& e) {
      throw InputError(fmt::format(
          "cannot reach the Redis rendezvous server at {}:{} ({}): start one (redis-server --port {}) or fix "
          "RETORT_RENDEZVOUS",
          address_.host, address_.port, e.what(), address_.port));
    }
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    try {
      redis_->set(full(key), data);
    } catch (const std::exception& e) {
      throw InputError(fmt::format(
          "the Redis rendezvous key '{}' on {}:{} is already set ({}): the prefix '{}' was used by an earlier run; "
          "give every run its own prefix, e.g. redis://{}:{}/$SLURM_JOB_ID",
          full(key), address_.host, address_.port, e.what(), address_.prefix, address_.host, address_.port));
    }
  }
  std::vector<char> get(const std::string& key) override { return redis_->get(full(key)); }
  void wait(const std::vector<std::string>& keys) override { redis_->wait(full(keys)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    redis_->wait(full(keys), timeout);
  }

 private:
  std::string full(const std::string& key) const { return address_.prefix + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& key : keys) out.push_back(full(key));
    return out;
  }

  RedisAddress address_;
  std::unique_ptr<gloo::rendezvous::RedisStore> redis_;
};

}  // namespace

bool is_redis_url(std::string_view rendezvous) {
  return rendezvous.starts_with(kScheme);
}

RedisAddress parse_redis_url(std::string_view url) {
  const auto bad = [&] {
    return InputError(
        fmt::format("RETORT_RENDEZVOUS '{}' is not a Redis address: use redis://HOST:PORT/PREFIX, e.g. "
                    "redis://10.0.0.1:6379/job42 (PREFIX new for every run)",
                    url));
  };
  if (!is_redis_url(url)) throw bad();
  const std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash + 1 >= rest.size()) throw bad();
  RedisAddress address;
  address.prefix = std::string(rest.substr(slash + 1));
  const std::string_view host_port = rest.substr(0, slash);
  const size_t colon = host_port.rfind(':');
  address.host = std::string(host_port.substr(0, colon));
  if (colon != std::string_view::npos) {
    const std::string_view port = host_port.substr(colon + 1);
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), address.port);
    if (ec != std::errc() || end != port.data() + port.size() || address.port <= 0 || address.port > 65535) throw bad();
  }
  if (address.host.empty()) throw bad();
  return address;
}

std::shared_ptr<gloo::rendezvous::Store> make_redis_store(std::string_view url) {
  return std::make_shared<PrefixedRedisStore>(parse_redis_url(url));
}

}  // namespace retort
