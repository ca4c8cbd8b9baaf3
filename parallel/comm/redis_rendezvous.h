#pragma once
// A rendezvous through a Redis server, for nodes that share no filesystem: RETORT_RENDEZVOUS=redis://HOST:PORT/PREFIX.
// Every key of the run lives under PREFIX, which must be new for every run (a job id): Gloo's Redis store refuses to
// set a key twice, so a prefix reused from an earlier run is an error naming it, never a silent mix of two runs.
#include <memory>
#include <string>
#include <string_view>

#include "parallel/comm/gloo_communicator.h"

namespace retort {

struct RedisAddress {
  std::string host;
  int port = 6379;
  std::string prefix;
};

// True for "redis://...".
bool is_redis_url(std::string_view rendezvous);

// Parses redis://HOST[:PORT]/PREFIX; anything else is an InputError showing the expected form.
RedisAddress parse_redis_url(std::string_view url);

// A store on the server at `url`, every key under its prefix. An unreachable server is an InputError naming it.
std::shared_ptr<gloo::rendezvous::Store> make_redis_store(std::string_view url);

}  // namespace retort
