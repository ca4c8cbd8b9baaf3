// Reading a launcher's environment, and processes-style groups over a FileStore (here as threads, each with
// its own LaunchEnv, which is all a process would have).
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "parallel/comm/rendezvous.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/test_support.h"

namespace retort {
namespace {

EnvLookup lookup_in(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string env_error(std::map<std::string, std::string> vars) {
  return testing::message_of([&] { read_launch_env(lookup_in(std::move(vars))); });
}

TEST(CommRendezvous, NoLauncherMeansOneRank) {
  const auto env = read_launch_env(lookup_in({}));
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.launcher, "none");
}

TEST(CommRendezvous, ReadsEachLauncher) {
  auto env = read_launch_env(lookup_in({{"RANK", "3"},
                                        {"WORLD_SIZE", "4"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "2"},
                                        {"RETORT_RENDEZVOUS", "/tmp/rdv"}}));
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.rendezvous, "/tmp/rdv");

  env = read_launch_env(lookup_in({{"OMPI_COMM_WORLD_RANK", "1"},
                                   {"OMPI_COMM_WORLD_SIZE", "2"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                   {"RETORT_RENDEZVOUS", "/shared/rdv"}}));
  EXPECT_EQ(env.launcher, "Open MPI");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.local_rank, 1);

  env = read_launch_env(lookup_in({{"SLURM_PROCID", "5"},
                                   {"SLURM_NTASKS", "8"},
                                   {"SLURM_LOCALID", "1"},
                                   {"SLURM_NTASKS_PER_NODE", "2(x4)"},
                                   {"RETORT_RENDEZVOUS", "/shared/rdv"}}));
  EXPECT_EQ(env.launcher, "Slurm");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_world_size, 0);  // "2(x4)": not a plain number, so unknown
}

TEST(CommRendezvous, RetortLaunchWinsInsideAnAllocation) {
  const auto env = read_launch_env(lookup_in({{"SLURM_PROCID", "0"},
                                              {"SLURM_NTASKS", "1"},
                                              {"RANK", "1"},
                                              {"WORLD_SIZE", "2"},
                                              {"LOCAL_RANK", "1"},
                                              {"RETORT_RENDEZVOUS", "/tmp/r"}}));
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
}

TEST(CommRendezvous, InconsistentValuesNameTheVariables) {
  EXPECT_NE(env_error({{"RANK", "0"}}).find("WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(env_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}}).find("RANK=4 must be in 0..3"),
            std::string::npos);
  EXPECT_NE(env_error({{"RANK", "one"}, {"WORLD_SIZE", "4"}}).find("RANK=one"), std::string::npos);
  EXPECT_NE(env_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}).find("RETORT_RENDEZVOUS is not set"),
            std::string::npos);
  EXPECT_NE(env_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"RETORT_RENDEZVOUS", "/r"}}).find("LOCAL_RANK"),
            std::string::npos);
  EXPECT_NE(env_error({{"OMPI_COMM_WORLD_RANK", "1"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"RETORT_RENDEZVOUS", "/r"}})
                .find("OMPI_COMM_WORLD_LOCAL_RANK=2 must be below OMPI_COMM_WORLD_LOCAL_SIZE=2"),
            std::string::npos);
}

TEST(CommRendezvous, ProcessesMeetInAFileStoreFolder) {
  testing::TempFolder folder;
  const int world = 3;
  auto start_world = [&](const std::filesystem::path& rendezvous) {
    std::vector<std::string> errors(world);
    std::vector<double> sums(world, 0.0);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          LaunchEnv env;
          env.rank = rank;
          env.world_size = world;
          env.local_rank = rank;
          env.local_world_size = world;
          env.rendezvous = rendezvous.string();
          auto comm = connect_world(env, comm_testing::test_options(std::chrono::seconds(5)));
          Tensor t = Tensor::full({3}, rank + 1.0);
          comm->all_reduce(t);
          sums[rank] = t.to_doubles()[2];
        } catch (const std::exception& e) {
          errors[rank] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    return std::make_pair(errors, sums);
  };
  const auto [errors, sums] = start_world(folder.path() / "run1");
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(errors[rank], "");
    EXPECT_EQ(sums[rank], 6.0);
  }
  // A folder left from an earlier run is refused with advice, not joined with stale addresses.
  const auto [stale_errors, ignored] = start_world(folder.path() / "run1");
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_NE(stale_errors[rank].find("fresh rendezvous folder"), std::string::npos) << stale_errors[rank];
  }
}

}  // namespace
}  // namespace retort
