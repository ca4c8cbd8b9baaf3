#include "parallel/comm/gloo_communicator.h"

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "core/util/broken_pipe.h"
#include "core/util/error.h"

namespace retort {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn reduce_function(ReduceOp op) {
  return op == ReduceOp::Sum ? static_cast<ReduceFn>(&gloo::sum<T>) : static_cast<ReduceFn>(&gloo::max<T>);
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

std::string joined_key(int rank) {
  return "joined." + std::to_string(rank);
}

std::string connected_key(int rank) {
  return "connected." + std::to_string(rank);
}

}  // namespace

std::shared_ptr<gloo::rendezvous::Store> make_hash_store() {
  return std::make_shared<gloo::rendezvous::HashStore>();
}

std::shared_ptr<gloo::rendezvous::Store> make_file_store(const std::string& folder) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  RETORT_INPUT_CHECK(std::filesystem::is_directory(folder),
                     "rendezvous folder '{}' does not exist and cannot be created{}{}", folder, error ? ": " : "",
                     error ? error.message() : "");
  return std::make_shared<gloo::rendezvous::FileStore>(folder);
}

struct GlooCommunicator::Connection {
  std::unique_ptr<gloo::rendezvous::PrefixStore> store;  // refers to the communicator's store_
  std::shared_ptr<gloo::rendezvous::Context> context;
};

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::rendezvous::Store> store,
                                   std::shared_ptr<gloo::transport::Device> device, std::string name, int rank,
                                   int size, GlooOptions options)
    : store_(std::move(store)),
      device_(std::move(device)),
      connection_(std::make_unique<Connection>()),
      name_(std::move(name)),
      rank_(rank),
      size_(size),
      options_(std::move(options)) {}

GlooCommunicator::~GlooCommunicator() = default;

std::shared_ptr<GlooCommunicator> GlooCommunicator::create(std::shared_ptr<gloo::rendezvous::Store> store,
                                                           std::string name, int rank, int size, GlooOptions options) {
  RETORT_INPUT_CHECK(store != nullptr, "gloo group '{}': no rendezvous store", name);
  RETORT_INPUT_CHECK(size >= 1, "gloo group '{}': the world size must be at least 1, got {}", name, size);
  RETORT_INPUT_CHECK(rank >= 0 && rank < size, "gloo group '{}': rank {} is outside 0..{}", name, rank, size - 1);
  RETORT_INPUT_CHECK(options.timeout.count() > 0, "gloo group '{}': the timeout must be positive, got {} ms", name,
                     options.timeout.count());
  // A peer that dies closes its sockets; the next write to one must fail as an error this group names, not end the
  // process by SIGPIPE.
  ignore_broken_pipe_signal();
  gloo::transport::tcp::attr attr;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
  } else {
    attr.hostname = options.hostname;
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error(fmt::format("gloo group '{}': cannot listen on {} '{}': {}", name,
                            options.iface.empty() ? "host" : "interface",
                            options.iface.empty() ? options.hostname : options.iface, e.what()));
  }
  std::shared_ptr<GlooCommunicator> comm(
      new GlooCommunicator(std::move(store), std::move(device), std::move(name), rank, size, std::move(options)));
  comm->join();
  return comm;
}

void GlooCommunicator::join() {
  connection_->store = std::make_unique<gloo::rendezvous::PrefixStore>("retort/" + name_, *store_);
  auto& store = *connection_->store;
  try {
    store.set(joined_key(rank_), {'1'});
  } catch (const std::exception& e) {
    // FileStore and HashStore refuse to overwrite a key: the group name was used before in this store.
    throw Error(fmt::format(
        "gloo group '{}' (rank {} of {}): cannot register in the rendezvous store: {}. The store already holds "
        "this group: use a fresh rendezvous folder for every run (or a new group name)",
        name_, rank_, size_, e.what()));
  }
  // Wait for every peer's key ourselves, before Gloo's own exchange, so a missing rank is named.
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  const std::vector<int> missing = peers_missing(store, joined_key, deadline);
  if (!missing.empty()) {
    throw PeerLostError(fmt::format(
        "rank{} {} did not join gloo group '{}' (size {}) within {}: rank {} gave up waiting. Look for an error or "
        "crash on {} before it reached this point, and check that every rank uses the same rendezvous",
        missing.size() > 1 ? "s" : "", join_ranks(missing), name_, size_, seconds_text(options_.timeout), rank_,
        missing.size() > 1 ? "those ranks" : "that rank"));
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
  context->setTimeout(options_.timeout);
  try {
    context->connectFullMesh(store, device_);
  } catch (const std::exception& e) {
    throw PeerLostError(fmt::format("gloo group '{}' (rank {} of {}): connecting to the other ranks failed: {}", name_,
                                    rank_, size_, e.what()));
  }
  // A rank's side of the mesh can be complete while a peer is still finishing its own. Without this second
  // round, a rank that fails right after joining could close its sockets under a peer still inside
  // connectFullMesh, and that peer's error would depend on timing; with it, the group exists on every rank before
  // any rank can leave it, and a lost peer always shows in the first collective.
  store.set(connected_key(rank_), {'1'});
  const std::vector<int> unconnected = peers_missing(store, connected_key, deadline);
  if (!unconnected.empty()) {
    throw PeerLostError(fmt::format(
        "rank{} {} did not finish connecting gloo group '{}' (size {}) within {}: rank {} gave up waiting. Look for "
        "an error or crash on {}",
        unconnected.size() > 1 ? "s" : "", join_ranks(unconnected), name_, size_, seconds_text(options_.timeout), rank_,
        unconnected.size() > 1 ? "those ranks" : "that rank"));
  }
  connection_->context = std::move(context);
}

std::vector<int> GlooCommunicator::peers_missing(gloo::rendezvous::Store& store, std::string (*key_of)(int),
                                                 std::chrono::steady_clock::time_point deadline) const {
  std::vector<int> missing;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      // After the first miss, only look: the deadline has passed.
      store.wait({key_of(peer)},
                 missing.empty() ? std::max(left, std::chrono::milliseconds(1)) : std::chrono::milliseconds(1));
    } catch (const std::exception&) {
      missing.push_back(peer);
    }
  }
  return missing;
}

template <typename Body>
void GlooCommunicator::guarded(std::string_view what, Body&& body) {
  std::lock_guard lock(mutex_);
  if (!broken_.empty()) {
    throw PeerLostError(
        fmt::format("{} on {}: the group is unusable after an earlier failure: {}", what, describe(), broken_));
  }
  try {
    body();
  } catch (const Error&) {
    throw;  // our own checks: the group is still consistent
  } catch (const std::exception& e) {
    broken_ = e.what();
    // In a pair the lost peer is known; in a larger group the transport error does not say which one it was.
    const std::string peer = size_ == 2 ? fmt::format("The peer, rank {} of this group,", 1 - rank_) : "A peer rank";
    throw PeerLostError(fmt::format(
        "{} on {} failed: {}. {} probably exited, failed, or did not reach the same collective within the {} "
        "timeout; the first error on the other ranks says why",
        what, describe(), e.what(), peer, seconds_text(options_.timeout)));
  }
}

void GlooCommunicator::check_cpu(const Tensor& tensor, std::string_view what) const {
  RETORT_INPUT_CHECK(tensor.defined(), "{} on {}: the tensor is undefined", what, describe());
  RETORT_INPUT_CHECK(tensor.device().is_cpu(),
                     "{} on {}: the gloo backend takes CPU tensors, got {} (use the nccl backend for GPU tensors)",
                     what, describe(), tensor.describe());
}

void GlooCommunicator::check_signatures(const CollectiveSignature& mine) {
  check_same_signature(mine);
}

void GlooCommunicator::check_same_signature(const CollectiveSignature& mine) {
  if (!options_.check_metadata || size_ == 1) return;
  std::vector<CollectiveSignature> all(size_);
  guarded("the metadata check before " + mine.describe(), [&] {
    gloo::AllgatherOptions opts(connection_->context);
    opts.setInput(const_cast<int64_t*>(mine.words.data()), mine.words.size());
    opts.setOutput(all.front().words.data(), mine.words.size() * size_);
    opts.setTag(next_tag());
    opts.setTimeout(options_.timeout);
    gloo::allgather(opts);
  });
  static_assert(sizeof(CollectiveSignature) == sizeof(CollectiveSignature::words), "signatures must pack");
  const auto problem = signature_mismatch(all);
  if (!problem.empty()) throw InputError(problem);
}

void GlooCommunicator::all_reduce_raw(void* data, int64_t count, DType dtype, ReduceOp op) {
  guarded(fmt::format("all_reduce({}) of {} {} elements", reduce_op_name(op), count, dtype_name(dtype)), [&] {
    gloo::AllreduceOptions opts(connection_->context);
    switch (dtype) {
      case DType::F32:
        opts.setOutput(static_cast<float*>(data), count);
        opts.setReduceFunction(reduce_function<float>(op));
        break;
      case DType::F64:
        opts.setOutput(static_cast<double*>(data), count);
        opts.setReduceFunction(reduce_function<double>(op));
        break;
      case DType::I32:
        opts.setOutput(static_cast<int32_t*>(data), count);
        opts.setReduceFunction(reduce_function<int32_t>(op));
        break;
      case DType::BF16:
        RETORT_CHECK(false, "bf16 reaches Gloo only widened to f32");
    }
    opts.setTag(next_tag());
    opts.setTimeout(options_.timeout);
    gloo::allreduce(opts);
  });
}

void GlooCommunicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_cpu(tensor, "all_reduce");
  check_signatures(CollectiveSignature::of("all_reduce", tensor, static_cast<int64_t>(op)));
  if (size_ == 1 || tensor.numel() == 0) return;
  if (tensor.dtype() == DType::BF16) {
    Tensor wide = tensor.to(DType::F32);
    all_reduce_raw(wide.raw_data(), wide.numel(), DType::F32, op);
    tensor.copy_(wide.to(DType::BF16));
    return;
  }
  all_reduce_raw(tensor.raw_data(), tensor.numel(), tensor.dtype(), op);
}

void GlooCommunicator::all_gather_flat(const Tensor& input, Tensor& output) {
  check_cpu(input, "all_gather");
  guarded("all_gather of " + input.describe(), [&] {
    gloo::AllgatherOptions opts(connection_->context);
    opts.setInput(static_cast<uint8_t*>(input.raw_data()), input.nbytes());
    opts.setOutput(static_cast<uint8_t*>(output.raw_data()), output.nbytes());
    opts.setTag(next_tag());
    opts.setTimeout(options_.timeout);
    gloo::allgather(opts);
  });
}

void GlooCommunicator::reduce_scatter_flat(const Tensor& input, Tensor& output, ReduceOp op) {
  check_cpu(input, "reduce_scatter");
  // A private copy to reduce in (widened for bf16), then this rank's block of it.
  Tensor reduced = input.dtype() == DType::BF16 ? input.to(DType::F32) : input.clone();
  all_reduce_raw(reduced.raw_data(), reduced.numel(), reduced.dtype(), op);
  const int64_t block = output.numel();
  Tensor mine = reduced.view({size_, block}).rows(rank_, 1).view(output.shape());
  output.copy_(mine.to(output.dtype()));
}

void GlooCommunicator::broadcast(Tensor& tensor, int root) {
  check_cpu(tensor, "broadcast");
  check_rank_in_group(root, size_, "broadcast: root", *this);
  check_signatures(CollectiveSignature::of("broadcast", tensor, root));
  if (size_ == 1 || tensor.numel() == 0) return;
  guarded(fmt::format("broadcast from rank {} of {}", root, tensor.describe()), [&] {
    gloo::BroadcastOptions opts(connection_->context);
    opts.setOutput(static_cast<uint8_t*>(tensor.raw_data()), tensor.nbytes());
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(options_.timeout);
    gloo::broadcast(opts);
  });
}

void GlooCommunicator::barrier() {
  check_signatures(CollectiveSignature::of("barrier", Tensor(), 0));
  if (size_ == 1) return;
  guarded("barrier", [&] {
    gloo::BarrierOptions opts(connection_->context);
    opts.setTag(next_tag());
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

std::shared_ptr<Communicator> GlooCommunicator::split(int color, int key) {
  return split_gloo(color, key);
}

std::shared_ptr<GlooCommunicator> GlooCommunicator::split_gloo(int color, int key) {
  check_signatures(CollectiveSignature::of("split", Tensor(), 0));
  // Every rank learns every (color, key) and derives the same groups from them.
  std::vector<int64_t> mine = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size_));
  if (size_ == 1) {
    all = mine;
  } else {
    guarded("split", [&] {
      gloo::AllgatherOptions opts(connection_->context);
      opts.setInput(mine.data(), mine.size());
      opts.setOutput(all.data(), all.size());
      opts.setTag(next_tag());
      opts.setTimeout(options_.timeout);
      gloo::allgather(opts);
    });
  }
  const int split_index = splits_++;
  if (color < 0) return nullptr;
  std::vector<std::tuple<int64_t, int>> members;  // (key, parent rank)
  for (int r = 0; r < size_; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  const int new_rank = static_cast<int>(
      std::find(members.begin(), members.end(), std::make_tuple(static_cast<int64_t>(key), rank_)) - members.begin());
  auto child_name = fmt::format("{}/split{}.color{}", name_, split_index, color);
  std::shared_ptr<GlooCommunicator> child(new GlooCommunicator(store_, device_, std::move(child_name), new_rank,
                                                               static_cast<int>(members.size()), options_));
  child->join();
  return child;
}

}  // namespace retort
