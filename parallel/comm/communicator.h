#pragma once
// Communicator: collectives over a group of ranks, on tensors. One interface, two backends: Gloo for CPU
// tensors (gloo_communicator.h) and NCCL for CUDA tensors (nccl_communicator.h). Every collective is blocking
// from the caller's point of view on the CPU and stream-ordered on the GPU, and every wait has a timeout: a
// peer that died or never arrives becomes a retort::Error on the others, never a hang.
//
// Contract shared by every collective:
//   - every rank of the group calls the same collectives in the same order (as with MPI / NCCL);
//   - tensors are contiguous row-major (all retort tensors are), on the backend's device kind;
//   - shapes and dtypes agree across ranks where the collective needs it (all_reduce, all_gather,
//     reduce_scatter, broadcast). With metadata checks on (Gloo's default) a mismatch is a clear error on
//     every rank; without them it may surface as a timeout or a transport error.
//   - one communicator is used by one thread at a time (calls are serialised by a lock, but two threads
//     interleaving collectives on one group would pair them up differently on different ranks).
// After a transport failure or a timeout the communicator is broken: every later call throws the first error.
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort {

enum class ReduceOp : uint8_t { Sum, Max };
std::string_view reduce_op_name(ReduceOp op);

// The default for every wait: long enough for a slow first connection on a busy machine, short enough that
// a crashed peer is reported within minutes.
inline constexpr std::chrono::milliseconds kDefaultCommTimeout = std::chrono::minutes(5);

// What a rank passes to one collective, exchanged before it when metadata checks are on. Fixed size so
// the exchange itself can never mismatch.
struct CollectiveSignature {
  static constexpr int kMaxDims = 8;
  std::array<int64_t, 8 + kMaxDims> words{};  // kind, dtype, device kind, argument, ndim, numel, 2 spare, dims

  static CollectiveSignature of(std::string_view collective, const Tensor& tensor, int64_t argument);
  std::string describe() const;  // "all_gather(dim=1) of f32[4, 8] on cpu"
  bool operator==(const CollectiveSignature&) const = default;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend() const = 0;  // "gloo" | "nccl"
  // The group's path from the world ("world", "world/split0.color1"): error messages name it.
  virtual const std::string& name() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  // In place: every rank ends with the elementwise reduction over all ranks.
  virtual void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  // Concatenation along `dim` (negative counts from the end) of every rank's tensor, in rank order.
  Tensor all_gather(const Tensor& input, int dim = 0);
  // The reduction over ranks, then this rank's 1/size chunk along `dim`; size(dim) must divide by size().
  Tensor reduce_scatter(const Tensor& input, int dim = 0, ReduceOp op = ReduceOp::Sum);
  // In place: every rank ends with root's tensor.
  virtual void broadcast(Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;

  // Collective over this group: ranks passing the same color form a new group, ordered by (key, rank).
  // A negative color means "not in any new group" and returns nullptr (MPI_UNDEFINED's habit).
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;
  // Collective over this group: a group of the listed ranks (of this group), in that order; ranks not listed
  // get nullptr. Every rank passes the same list.
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks);

  std::string describe() const;  // "gloo group 'world' (rank 1 of 4)"

 protected:
  // Backend primitives on contiguous buffers: `output` holds size() blocks of input.numel() elements in rank
  // order (all_gather) or one block of input.numel() / size() elements (reduce_scatter). Shapes and metadata
  // are already checked when these run.
  virtual void all_gather_flat(const Tensor& input, Tensor& output) = 0;
  virtual void reduce_scatter_flat(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  // Throws the same clear error on every rank when the ranks passed different signatures; a no-op for a
  // backend that does not check.
  virtual void check_signatures(const CollectiveSignature& mine) = 0;

  // The error for signatures that differ across ranks (empty when they agree).
  std::string signature_mismatch(const std::vector<CollectiveSignature>& all) const;
};

// "3 s", "0.5 s": how error messages state a timeout.
std::string seconds_text(std::chrono::milliseconds duration);

// Validates a rank argument (root, a member of a group) against a group size.
void check_rank_in_group(int rank, int size, std::string_view what, const Communicator& group);

}  // namespace retort
