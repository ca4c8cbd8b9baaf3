#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/cuda/cuda_context.h"
#include "core/util/error.h"

namespace retort {
namespace {

using Clock = std::chrono::steady_clock;

// How often host-side waits and the watchdog look at NCCL and CUDA: short enough not to add latency to a
// barrier, long enough to cost nothing.
constexpr auto kPollInterval = std::chrono::microseconds(200);
constexpr int kSpinPolls = 2000;  // polls that only yield before wait_for_nccl starts sleeping
constexpr auto kWatchdogInterval = std::chrono::milliseconds(20);

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::F64:
      return ncclFloat64;
  }
  RETORT_CHECK(false, "no NCCL type for dtype {}", static_cast<int>(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::Sum ? ncclSum : ncclMax;
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<GlooCommunicator> bootstrap, int device, NcclOptions options)
    : bootstrap_(std::move(bootstrap)), device_(device), options_(options) {}

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(std::shared_ptr<GlooCommunicator> bootstrap, int device,
                                                           NcclOptions options) {
  RETORT_INPUT_CHECK(bootstrap != nullptr, "an NCCL communicator needs a Gloo group of the same ranks");
  RETORT_INPUT_CHECK(device >= 0 && device < cuda_device_count(),
                     "NCCL on {}: GPU {} does not exist ({} visible); each local rank needs its own GPU",
                     bootstrap->describe(), device, cuda_device_count());
  std::shared_ptr<NcclCommunicator> comm(new NcclCommunicator(std::move(bootstrap), device, options));
  comm->init();
  return comm;
}

void NcclCommunicator::init() {
  cuda::DeviceGuard guard(device_);
  // Rank 0 draws the id; everyone else receives it through the bootstrap group (which has its own timeout).
  ncclUniqueId id;
  static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0);
  Tensor id_bytes = Tensor::zeros({static_cast<int64_t>(sizeof(ncclUniqueId) / sizeof(int32_t))}, DType::I32);
  if (bootstrap_->rank() == 0) {
    const ncclResult_t status = ncclGetUniqueId(&id);
    RETORT_CHECK(status == ncclSuccess, "ncclGetUniqueId failed on {}: {}", describe(), ncclGetErrorString(status));
    std::memcpy(id_bytes.raw_data(), &id, sizeof(id));
  }
  bootstrap_->broadcast(id_bytes, 0);
  std::memcpy(&id, id_bytes.raw_data(), sizeof(id));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // See NcclOptions::blocking; RETORT_NCCL_BLOCKING=0|1 overrides the option for a whole run.
  bool blocking = options_.blocking;
  if (const char* env = std::getenv("RETORT_NCCL_BLOCKING")) blocking = std::string_view(env) == "1";
  config.blocking = blocking ? 1 : 0;
  const auto deadline = Clock::now() + options_.timeout;
  const ncclResult_t status = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
  RETORT_CHECK(status == ncclSuccess || status == ncclInProgress, "ncclCommInitRankConfig failed on {}: {}", describe(),
               ncclGetErrorString(status));
  try {
    wait_for_nccl("NCCL initialisation", deadline);  // nothing else can hold call_mutex_ yet
  } catch (...) {
    if (comm_ != nullptr && !aborted_) ncclCommAbort(comm_);
    comm_ = nullptr;
    aborted_ = true;
    throw;
  }
  RETORT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard lock(state_mutex_);
    stopping_ = true;
  }
  state_changed_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  // Never throw from here: a destructor may run while an error unwinds.
  std::lock_guard call_lock(call_mutex_);
  int previous_device = 0;
  cudaGetDevice(&previous_device);
  cudaSetDevice(device_);
  const auto deadline = Clock::now() + options_.timeout;
  bool quiet = true;
  for (auto& entry : pending_) {
    while (cudaEventQuery(entry.done) == cudaErrorNotReady && Clock::now() < deadline && broken_.empty()) {
      std::this_thread::sleep_for(kPollInterval);
    }
    quiet = quiet && cudaEventQuery(entry.done) == cudaSuccess;
    cudaEventDestroy(entry.done);
  }
  pending_.clear();
  if (comm_ != nullptr && !aborted_) {
    bool finalized = false;
    const ncclResult_t finalize = quiet && broken_.empty() ? ncclCommFinalize(comm_) : ncclInternalError;
    if (finalize == ncclSuccess || finalize == ncclInProgress) {
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
             Clock::now() < deadline) {
        std::this_thread::sleep_for(kPollInterval);
      }
      finalized = state == ncclSuccess;
    }
    // A communicator with work that never finished (a dead peer) can only be aborted.
    if (finalized) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  cudaSetDevice(previous_device);
}

void NcclCommunicator::wait_for_nccl(const std::string& what, Clock::time_point deadline) {
  // The caller holds call_mutex_, so failures abort here (mark_broken's locked form).
  auto fail = [&](const std::string& reason) {
    mark_broken_locked(reason);
    throw Error(fmt::format("{} on {} failed: {}", what, describe(), reason));
  };
  auto peer_lost = [&](const std::string& reason) {
    mark_broken_locked(reason);
    throw PeerLostError(fmt::format("{} on {} failed: {}", what, describe(), reason));
  };
  int polls = 0;
  auto backoff = std::chrono::microseconds(5);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    std::string broken;
    {
      std::lock_guard lock(state_mutex_);
      broken = broken_;
      if (broken.empty()) {
        const ncclResult_t status = ncclCommGetAsyncError(comm_, &state);
        if (status != ncclSuccess) state = status;
      }
    }
    if (!broken.empty()) fail(broken);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      fail(fmt::format("NCCL reported {} ({})", ncclGetErrorString(state), ncclGetLastError(comm_)));
    }
    if (Clock::now() > deadline) {
      peer_lost(fmt::format("it did not finish within {}: a peer rank probably exited, failed, or did not reach it",
                            seconds_text(options_.timeout)));
    }
    // A non-blocking communicator usually finishes a launch within microseconds: spin briefly, then back off
    // to the poll interval. Sleeping the full interval at once would add ~0.2 ms to every small collective.
    if (++polls < kSpinPolls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::duration_cast<std::chrono::microseconds>(kPollInterval));
    }
  }
}

void NcclCommunicator::mark_broken_locked(const std::string& reason) {
  std::lock_guard lock(state_mutex_);
  if (broken_.empty()) broken_ = reason;
  if (!aborted_ && comm_ != nullptr) {
    ncclCommAbort(comm_);
    aborted_ = true;
  }
}

void NcclCommunicator::mark_broken(const std::string& reason) {
  {
    std::lock_guard lock(state_mutex_);
    if (broken_.empty()) broken_ = reason;
  }
  // Only a thread holding call_mutex_ aborts, so no NCCL call on comm_ runs during or after the abort. When a
  // host call is running, it sees broken_ at its next poll (or the watchdog retries) and aborts then.
  std::unique_lock call_lock(call_mutex_, std::try_to_lock);
  if (call_lock.owns_lock()) mark_broken_locked(reason);
}

void NcclCommunicator::throw_if_broken_locked(std::string_view what) {
  std::string broken;
  {
    std::lock_guard lock(state_mutex_);
    broken = broken_;
  }
  if (broken.empty()) return;
  mark_broken_locked(broken);  // aborts if the watchdog could not
  throw Error(fmt::format("{} on {}: the group is unusable after an earlier failure: {}", what, describe(), broken));
}

void NcclCommunicator::watchdog_loop() {
  cudaSetDevice(device_);
  std::unique_lock lock(state_mutex_);
  while (!stopping_) {
    state_changed_.wait_for(lock, kWatchdogInterval);
    if (stopping_ || aborted_) continue;
    if (!broken_.empty()) {
      // Broken while a host call held call_mutex_ and never came back to poll: abort now if we can.
      const std::string reason = broken_;
      lock.unlock();
      mark_broken(reason);
      lock.lock();
      continue;
    }
    std::string failure;
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
      failure = fmt::format("NCCL reported an asynchronous error: {} ({})", ncclGetErrorString(state),
                            ncclGetLastError(comm_));
    }
    while (failure.empty() && !pending_.empty()) {
      auto& front = pending_.front();
      const cudaError_t status = cudaEventQuery(front.done);
      if (status == cudaSuccess) {
        cudaEventDestroy(front.done);
        pending_.pop_front();
      } else if (status != cudaErrorNotReady) {
        failure = fmt::format("{} failed on the GPU: {}", front.what, cudaGetErrorString(status));
      } else if (Clock::now() > front.deadline) {
        failure = fmt::format(
            "{} did not finish within {}: a peer rank probably exited, failed, or did not reach the same collective",
            front.what, seconds_text(options_.timeout));
      } else {
        break;  // later collectives finish after this one
      }
    }
    if (failure.empty()) continue;
    lock.unlock();
    mark_broken(failure);
    lock.lock();
  }
}

void NcclCommunicator::check_device(const Tensor& tensor, std::string_view what) const {
  RETORT_INPUT_CHECK(tensor.defined(), "{} on {}: the tensor is undefined", what, describe());
  RETORT_INPUT_CHECK(tensor.device() == Device::cuda(device_),
                     "{} on {}: the nccl backend of this rank works on cuda:{}, got {} (use the gloo backend for "
                     "CPU tensors)",
                     what, describe(), device_, tensor.describe());
}

void NcclCommunicator::check_signatures(const CollectiveSignature& mine) {
  if (options_.check_metadata) bootstrap_->check_same_signature(mine);
}

template <typename Call>
void NcclCommunicator::enqueue(const std::string& what, Call&& call, cudaEvent_t* done_out) {
  std::lock_guard call_lock(call_mutex_);
  throw_if_broken_locked(what);
  cuda::DeviceGuard guard(device_);
  cudaStream_t compute = cuda::compute_stream(device_);
  cudaEvent_t ready = nullptr, done = nullptr;
  RETORT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  RETORT_CUDA_CHECK(cudaEventRecord(ready, compute));
  RETORT_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
  cudaEventDestroy(ready);  // the wait above has captured it

  const auto deadline = Clock::now() + options_.timeout;
  const ncclResult_t status = call();
  if (status != ncclSuccess && status != ncclInProgress) {
    const std::string reason = fmt::format("{} ({})", ncclGetErrorString(status), ncclGetLastError(comm_));
    mark_broken_locked(reason);
    throw Error(fmt::format("{} on {} failed: {}", what, describe(), reason));
  }
  if (status == ncclInProgress) wait_for_nccl(what, deadline);

  RETORT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  RETORT_CUDA_CHECK(cudaEventRecord(done, stream_));
  RETORT_CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
  if (done_out != nullptr) *done_out = done;
  {
    std::lock_guard lock(state_mutex_);
    pending_.push_back({done, deadline, what + " on " + describe()});
  }
  // No notify: the watchdog looks every kWatchdogInterval anyway, and waking it on every collective costs a
  // context switch per call, which is most of a small collective's time.
}

void NcclCommunicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_device(tensor, "all_reduce");
  check_signatures(CollectiveSignature::of("all_reduce", tensor, static_cast<int64_t>(op)));
  if (tensor.numel() == 0) return;
  void* data = tensor.raw_data();
  enqueue(fmt::format("all_reduce({}) of {}", reduce_op_name(op), tensor.describe()), [&] {
    return ncclAllReduce(data, data, tensor.numel(), nccl_dtype(tensor.dtype()), nccl_op(op), comm_, stream_);
  });
}

void NcclCommunicator::all_gather_flat(const Tensor& input, Tensor& output) {
  check_device(input, "all_gather");
  enqueue("all_gather of " + input.describe(), [&] {
    return ncclAllGather(input.raw_data(), output.raw_data(), input.numel(), nccl_dtype(input.dtype()), comm_, stream_);
  });
}

void NcclCommunicator::reduce_scatter_flat(const Tensor& input, Tensor& output, ReduceOp op) {
  check_device(input, "reduce_scatter");
  enqueue(fmt::format("reduce_scatter({}) of {}", reduce_op_name(op), input.describe()), [&] {
    return ncclReduceScatter(input.raw_data(), output.raw_data(), output.numel(), nccl_dtype(input.dtype()),
                             nccl_op(op), comm_, stream_);
  });
}

void NcclCommunicator::broadcast(Tensor& tensor, int root) {
  check_device(tensor, "broadcast");
  check_rank_in_group(root, size(), "broadcast: root", *this);
  check_signatures(CollectiveSignature::of("broadcast", tensor, root));
  if (tensor.numel() == 0) return;
  void* data = tensor.raw_data();
  enqueue(fmt::format("broadcast from rank {} of {}", root, tensor.describe()),
          [&] { return ncclBroadcast(data, data, tensor.numel(), nccl_dtype(tensor.dtype()), root, comm_, stream_); });
}

void NcclCommunicator::barrier() {
  check_signatures(CollectiveSignature::of("barrier", Tensor(), 0));
  // A one-element all-reduce every GPU must reach, then a host wait on its completion with the deadline.
  Tensor token = Tensor::zeros({1}, DType::F32, Device::cuda(device_));
  cudaEvent_t done = nullptr;
  enqueue(
      "barrier",
      [&] { return ncclAllReduce(token.raw_data(), token.raw_data(), 1, ncclFloat32, ncclSum, comm_, stream_); },
      &done);
  const auto deadline = Clock::now() + options_.timeout;
  for (;;) {
    {
      // The watchdog owns (and destroys) the event once it has completed: query it under its lock.
      std::lock_guard lock(state_mutex_);
      if (!broken_.empty()) throw Error(fmt::format("barrier on {} failed: {}", describe(), broken_));
      const bool still_pending =
          std::any_of(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.done == done; });
      if (!still_pending || cudaEventQuery(done) == cudaSuccess) return;
    }
    if (Clock::now() > deadline) {
      const std::string reason =
          fmt::format("barrier did not complete within {}: a peer rank probably exited, failed, or never reached it",
                      seconds_text(options_.timeout));
      mark_broken(reason);
      throw PeerLostError(fmt::format("barrier on {}: {}", describe(), reason));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  auto group = bootstrap_->split_gloo(color, key);
  if (group == nullptr) return nullptr;
  return create(std::move(group), device_, options_);
}

}  // namespace retort
#endif  // RETORT_WITH_CUDA
