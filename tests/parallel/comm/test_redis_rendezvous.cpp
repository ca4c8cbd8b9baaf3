// The Redis rendezvous (RETORT_RENDEZVOUS=redis://HOST:PORT/PREFIX): addresses parse or are refused with the
// expected form; an unreachable server and a prefix reused from an earlier run are InputErrors naming them; four
// ranks meet through a real local redis-server and all-reduce exactly.
#include <gloo/rendezvous/store.h>
#include <gtest/gtest.h>

#include <thread>

#include "core/util/error.h"
#include "parallel/comm/redis_rendezvous.h"
#include "tests/parallel/comm/redis_server_support.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/test_support.h"

namespace retort {
namespace {

std::string input_error(const std::function<void()>& call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(RedisRendezvous, AddressesParse) {
  const RedisAddress a = parse_redis_url("redis://10.0.0.1:6380/job42");
  EXPECT_EQ(a.host, "10.0.0.1");
  EXPECT_EQ(a.port, 6380);
  EXPECT_EQ(a.prefix, "job42");
  const RedisAddress b = parse_redis_url("redis://head-node/run/7");
  EXPECT_EQ(b.host, "head-node");
  EXPECT_EQ(b.port, 6379);  // Redis's own default
  EXPECT_EQ(b.prefix, "run/7");
  EXPECT_TRUE(is_redis_url("redis://x/y"));
  EXPECT_FALSE(is_redis_url("/shared/rdv/job42"));
  for (const char* bad : {"redis://host:port/x", "redis://host:6379", "redis://host:6379/", "redis://:6379/x",
                          "redis://h:70000/x", "http://h/x"}) {
    const std::string message = input_error([&] { parse_redis_url(bad); });
    EXPECT_NE(message.find("redis://HOST:PORT/PREFIX"), std::string::npos) << bad << ": " << message;
  }
}

TEST(RedisRendezvous, AnUnreachableServerIsNamed) {
  const int port = comm_testing::free_loopback_port();  // nothing listens there
  const std::string message = input_error([&] { make_redis_store(fmt::format("redis://127.0.0.1:{}/x", port)); });
  EXPECT_NE(message.find(fmt::format("Redis rendezvous server at 127.0.0.1:{}", port)), std::string::npos) << message;
  EXPECT_NE(message.find("redis-server --port"), std::string::npos) << message;
}

class RedisRendezvousWithServer : public ::testing::Test {
 protected:
  void SetUp() override {
    RETORT_REQUIRE_ORACLE(comm_testing::redis_server_installed(), "redis-server is not installed");
    server_ = std::make_unique<comm_testing::RedisServer>();
    ASSERT_TRUE(server_->running()) << "redis-server did not start on port " << server_->port();
  }
  std::unique_ptr<comm_testing::RedisServer> server_;
};

TEST_F(RedisRendezvousWithServer, FourRanksMeetAndAllReduceExactly) {
  const std::string url = server_->url("four-ranks");
  std::vector<std::thread> ranks;
  std::vector<std::vector<double>> results(4);
  std::vector<std::string> errors(4);
  for (int rank = 0; rank < 4; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        auto comm = GlooCommunicator::create(make_redis_store(url), "world", rank, 4,
                                             comm_testing::test_options(std::chrono::seconds(20)));
        Tensor t = comm_testing::rank_tensor(rank, {100}, DType::F32);
        comm->all_reduce(t);
        results[static_cast<size_t>(rank)] = t.to_doubles();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
    for (int64_t i = 0; i < 100; ++i) {
      double want = 0;
      for (int r = 0; r < 4; ++r) want += comm_testing::input_value(r, i, DType::F32);
      EXPECT_EQ(results[static_cast<size_t>(rank)][static_cast<size_t>(i)], want) << "rank " << rank << " " << i;
    }
  }
}

TEST_F(RedisRendezvousWithServer, APrefixOfAnEarlierRunIsRefusedNamingIt) {
  const std::string url = server_->url("job7");
  make_redis_store(url)->set("retort/world/joined.0", {'x'});  // what an earlier run left behind
  const std::string message = input_error([&] { make_redis_store(url)->set("retort/world/joined.0", {'y'}); });
  EXPECT_NE(message.find("the prefix 'job7' was used by an earlier run"), std::string::npos) << message;
  // A new prefix on the same server is a new run.
  EXPECT_NO_THROW(make_redis_store(server_->url("job8"))->set("retort/world/joined.0", {'y'}));
}

}  // namespace
}  // namespace retort
