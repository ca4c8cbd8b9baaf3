#pragma once
// The Gloo backend: collectives on CPU tensors over TCP. Ranks find each other through a rendezvous store:
// a HashStore shared by thread ranks of one process (the unit tests; see thread_ranks.h) or a FileStore in a
// folder every process can see (rendezvous.h). Gloo's own headers stay out of this one.
//
// Dtypes: f32, f64 and i32 are reduced natively. Gloo cannot add bf16, so a bf16 all_reduce or reduce_scatter
// widens to f32, reduces in f32 and rounds once at the end (more accurate than rounding after every hop, at
// twice the bytes on the wire). all_gather and broadcast move bytes and take any dtype.
// reduce_scatter is an all_reduce followed by taking this rank's chunk: Gloo 0.5's reduce-scatter is an
// old-style algorithm without timeouts, and the CPU path is for correctness, not bandwidth.
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"

namespace gloo {
namespace rendezvous {
class Store;
class Context;
}  // namespace rendezvous
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace retort {

struct GlooOptions {
  std::chrono::milliseconds timeout = kDefaultCommTimeout;  // every join and every collective
  // The address this rank listens on: loopback for one machine, the node's name or address across nodes.
  std::string hostname = "127.0.0.1";
  std::string iface;  // a network interface ("eth0") instead of hostname, when set
  // Exchange a small signature (collective, dtype, shape, argument) before each collective so a mismatch is
  // the same clear error on every rank. Costs one tiny all_gather per collective.
  bool check_metadata = true;
};

std::shared_ptr<gloo::rendezvous::Store> make_hash_store();                           // for thread ranks
std::shared_ptr<gloo::rendezvous::Store> make_file_store(const std::string& folder);  // for processes

class GlooCommunicator final : public Communicator {
 public:
  // Collective over `size` ranks sharing `store`: every rank calls it with the same `name`, which must be
  // new in that store (its keys live under that name). Throws, naming the missing ranks, when not every
  // rank joined within options.timeout.
  static std::shared_ptr<GlooCommunicator> create(std::shared_ptr<gloo::rendezvous::Store> store, std::string name,
                                                  int rank, int size, GlooOptions options = {});
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "gloo"; }
  const std::string& name() const override { return name_; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  const GlooOptions& options() const { return options_; }

  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  void broadcast(Tensor& tensor, int root) override;
  void barrier() override;
  std::shared_ptr<Communicator> split(int color, int key) override;
  // split() with the concrete type, for code (the NCCL backend) that rides on a Gloo group.
  std::shared_ptr<GlooCommunicator> split_gloo(int color, int key);

  // Throws the same InputError on every rank when the ranks' signatures differ (see GlooOptions).
  void check_same_signature(const CollectiveSignature& mine);

 protected:
  void all_gather_flat(const Tensor& input, Tensor& output) override;
  void reduce_scatter_flat(const Tensor& input, Tensor& output, ReduceOp op) override;
  void check_signatures(const CollectiveSignature& mine) override;

 private:
  struct Connection;  // the Gloo context and the store prefix it was made from
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Store> store, std::shared_ptr<gloo::transport::Device> device,
                   std::string name, int rank, int size, GlooOptions options);
  void join();
  // The peers whose key_of(peer) did not appear in `store` by `deadline` (after the first miss, each is only looked
  // at once).
  std::vector<int> peers_missing(gloo::rendezvous::Store& store, std::string (*key_of)(int),
                                 std::chrono::steady_clock::time_point deadline) const;
  // Runs one Gloo call under the lock, turning a Gloo failure into a retort::Error that names the group, and
  // marking the group broken.
  template <typename Body>
  void guarded(std::string_view what, Body&& body);
  void all_reduce_raw(void* data, int64_t count, DType dtype, ReduceOp op);
  void check_cpu(const Tensor& tensor, std::string_view what) const;
  uint32_t next_tag() { return tag_++; }

  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::unique_ptr<Connection> connection_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  GlooOptions options_;
  std::recursive_mutex mutex_;
  std::string broken_;  // the first transport error; non-empty means every later call fails
  uint32_t tag_ = 0;
  int splits_ = 0;  // how many splits this group made: names children uniquely, the same on every rank
};

}  // namespace retort
