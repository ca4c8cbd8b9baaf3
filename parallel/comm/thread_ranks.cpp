#include "parallel/comm/thread_ranks.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "core/util/error.h"

namespace retort {

std::vector<RankFailure> run_ranks_collect(int world, const RankBody& body, const GlooOptions& options) {
  RETORT_INPUT_CHECK(world >= 1, "run_ranks: the world size must be at least 1, got {}", world);
  auto store = make_hash_store();
  std::mutex failures_mutex;
  std::vector<RankFailure> failures;
  // Recorded before the rank drops its group, so the cause precedes the errors it provokes on the others.
  auto record = [&](int rank, std::string message) {
    std::lock_guard lock(failures_mutex);
    failures.push_back({rank, std::move(message)});
  };
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::shared_ptr<Communicator> comm;
      try {
        comm = GlooCommunicator::create(store, "world", rank, world, options);
        body(comm);
        // A rank that is done waits for the others before closing its connections: closing a socket while a
        // peer's last bytes are still unread can reset the connection under a peer that is not done yet.
        comm->barrier();
      } catch (const std::exception& e) {
        record(rank, e.what());
      } catch (...) {
        record(rank, "an exception that is not a std::exception");
      }
      // Dropping the group closes its connections, so peers still waiting on this rank fail at once.
      comm.reset();
    });
  }
  for (auto& thread : threads) thread.join();
  return failures;
}

void run_ranks(int world, const RankBody& body, const GlooOptions& options) {
  const auto failures = run_ranks_collect(world, body, options);
  if (failures.empty()) return;
  std::string others;
  for (size_t i = 1; i < failures.size(); ++i)
    others += fmt::format("\n  then rank {}: {}", failures[i].rank, failures[i].message);
  throw Error(fmt::format("rank {} failed: {}{}", failures.front().rank, failures.front().message, others));
}

}  // namespace retort
