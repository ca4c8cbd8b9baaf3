// What happens when ranks disagree or disappear: a clear error on every surviving rank within the timeout,
// never a hang. Timeouts here are short so the whole file runs in seconds.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "core/util/error.h"
#include "parallel/comm/gloo_communicator.h"
#include "tests/parallel/comm/test_comm_support.h"

namespace retort {
namespace {

using Clock = std::chrono::steady_clock;
using comm_testing::test_options;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string failure_of(const std::vector<RankFailure>& failures, int rank) {
  for (const auto& f : failures) {
    if (f.rank == rank) return f.message;
  }
  return "(rank " + std::to_string(rank) + " did not fail)";
}

TEST(CommFailures, MismatchedShapesAreTheSameClearErrorOnEveryRank) {
  std::atomic<int> recovered{0};
  const auto failures = run_ranks_collect(
      2,
      [&](std::shared_ptr<Communicator> comm) {
        Tensor t = Tensor::zeros({comm->rank() == 0 ? 4 : 5});
        try {
          comm->all_reduce(t);
        } catch (const InputError&) {
          // The check happens before any data moves, so the group is still usable afterwards.
          Tensor ok = Tensor::full({3}, 1.0);
          comm->all_reduce(ok);
          if (ok.to_doubles()[0] == 2.0) recovered.fetch_add(1);
          throw;
        }
      },
      test_options());
  ASSERT_EQ(failures.size(), 2u);
  for (const auto& failure : failures) {
    EXPECT_TRUE(contains(failure.message, "different shapes")) << failure.message;
    EXPECT_TRUE(contains(failure.message, "rank 0: all_reduce(sum) of f32[4]")) << failure.message;
    EXPECT_TRUE(contains(failure.message, "rank 1: all_reduce(sum) of f32[5]")) << failure.message;
  }
  EXPECT_EQ(recovered.load(), 2);
}

TEST(CommFailures, DifferentCollectivesOnDifferentRanksAreAnError) {
  const auto failures = run_ranks_collect(
      2,
      [](std::shared_ptr<Communicator> comm) {
        Tensor t = Tensor::zeros({4});
        if (comm->rank() == 0) {
          comm->broadcast(t, 0);
        } else {
          comm->all_reduce(t, ReduceOp::Max);
        }
      },
      test_options());
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_TRUE(contains(failures[0].message, "broadcast(root=0)")) << failures[0].message;
  EXPECT_TRUE(contains(failures[0].message, "all_reduce(max)")) << failures[0].message;
}

TEST(CommFailures, ARankThatThrowsBeforeACollectiveFailsTheOthersQuickly) {
  const auto start = Clock::now();
  const auto failures = run_ranks_collect(
      3,
      [](std::shared_ptr<Communicator> comm) {
        if (comm->rank() == 2) throw Error("rank 2 ran out of data");
        Tensor t = Tensor::full({1000}, 1.0);
        comm->all_reduce(t);
      },
      test_options(std::chrono::seconds(2)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  ASSERT_EQ(failures.size(), 3u);
  EXPECT_EQ(failures.front().rank, 2);  // the cause comes first
  for (int rank : {0, 1}) {
    const auto message = failure_of(failures, rank);
    EXPECT_TRUE(contains(message, "gloo group 'world'")) << message;
    EXPECT_TRUE(contains(message, "all_reduce")) << message;
    EXPECT_TRUE(contains(message, "peer rank")) << message;
  }
  // run_ranks puts the cause first in its one message.
  const std::string combined = [&] {
    try {
      run_ranks(
          2,
          [](std::shared_ptr<Communicator> comm) {
            if (comm->rank() == 1) throw Error("boom on one");
            comm->barrier();
          },
          test_options(std::chrono::seconds(2)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_EQ(combined.rfind("rank 1 failed: boom on one", 0), 0u) << combined;
  EXPECT_TRUE(contains(combined, "then rank 0:")) << combined;
}

TEST(CommFailures, ASilentRankTurnsIntoATimeoutAndTheGroupStaysBroken) {
  const auto start = Clock::now();
  std::string after_failure;
  const auto failures = run_ranks_collect(
      2,
      [&](std::shared_ptr<Communicator> comm) {
        Tensor t = Tensor::full({16}, 1.0);
        if (comm->rank() == 1) {
          // Alive and connected but not calling: only the timeout can end rank 0's wait.
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          comm->all_reduce(t);
          return;
        }
        try {
          comm->all_reduce(t);
        } catch (const Error&) {
          try {
            comm->barrier();
          } catch (const Error& again) {
            after_failure = again.what();
          }
          throw;
        }
      },
      test_options(std::chrono::milliseconds(500)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  const auto message = failure_of(failures, 0);
  EXPECT_TRUE(contains(message, "0.5 s timeout")) << message;
  EXPECT_TRUE(contains(after_failure, "unusable after an earlier failure")) << after_failure;
}

TEST(CommFailures, APeerThatClosesDuringALargeCollectiveIsAnErrorNotSigpipe) {
  // Writing into a socket whose reader is gone raises SIGPIPE, which would end this whole test binary (exit 141)
  // instead of letting rank 0 report the lost peer. A Gloo group therefore makes its process ignore SIGPIPE.
  auto store = make_hash_store();
  GlooOptions options = test_options(std::chrono::seconds(5));
  options.check_metadata = false;  // straight to the payload writes
  std::atomic<bool> peer_closed{false};
  std::string message;
  std::thread peer([&] {
    auto comm = GlooCommunicator::create(store, "world", 1, 2, options);
    comm->barrier();
    comm.reset();  // closes its sockets with rank 0 about to write 64 MiB to it
    peer_closed = true;
  });
  {
    auto comm = GlooCommunicator::create(store, "world", 0, 2, options);
    struct sigaction action {};
    ::sigaction(SIGPIPE, nullptr, &action);
    EXPECT_EQ(action.sa_handler, SIG_IGN) << "a process with a Gloo group must ignore SIGPIPE";
    comm->barrier();
    while (!peer_closed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Tensor big = Tensor::full({16 << 20}, 1.0);
    try {
      for (int i = 0; i < 3; ++i) comm->all_reduce(big);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  peer.join();
  EXPECT_TRUE(contains(message, "gloo group 'world'")) << message;
  EXPECT_TRUE(contains(message, "all_reduce")) << message;
  EXPECT_TRUE(contains(message, "The peer, rank 1 of this group,")) << message;  // a pair names the lost one
}

TEST(CommFailures, ARankThatNeverJoinsIsNamed) {
  auto store = make_hash_store();
  std::vector<std::string> messages(3);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int rank = 0; rank < 2; ++rank) {  // rank 2 never shows up
    threads.emplace_back([&, rank] {
      try {
        GlooCommunicator::create(store, "world", rank, 3, test_options(std::chrono::milliseconds(700)));
      } catch (const Error& e) {
        messages[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(contains(messages[rank], "rank 2 did not join gloo group 'world' (size 3) within 0.7 s"))
        << messages[rank];
  }
}

TEST(CommFailures, BadArgumentsAreInputErrors) {
  comm_testing::on_ranks(2, [](std::shared_ptr<Communicator> comm) {
    Tensor t = Tensor::zeros({4});
    EXPECT_THROW(comm->broadcast(t, 2), InputError);
    EXPECT_THROW(comm->all_gather(t, 1), InputError);
    EXPECT_THROW(comm->new_group({0, 0}), InputError);
    Tensor undefined;
    EXPECT_THROW(comm->all_reduce(undefined), InputError);
    comm->barrier();  // local argument errors leave the group usable
  });
  EXPECT_THROW(GlooCommunicator::create(make_hash_store(), "world", 2, 2), InputError);
}

}  // namespace
}  // namespace retort
