#include "parallel/comm/communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/tensor/device_runtime.h"
#include "core/util/error.h"

namespace retort {
namespace {

enum class CollectiveKind : int64_t { AllReduce = 1, AllGather, ReduceScatter, Broadcast, Barrier, Split };

CollectiveKind kind_of(std::string_view collective) {
  if (collective == "all_reduce") return CollectiveKind::AllReduce;
  if (collective == "all_gather") return CollectiveKind::AllGather;
  if (collective == "reduce_scatter") return CollectiveKind::ReduceScatter;
  if (collective == "broadcast") return CollectiveKind::Broadcast;
  if (collective == "barrier") return CollectiveKind::Barrier;
  if (collective == "split") return CollectiveKind::Split;
  RETORT_CHECK(false, "unknown collective '{}'", collective);
}

std::string_view kind_name(int64_t kind) {
  switch (static_cast<CollectiveKind>(kind)) {
    case CollectiveKind::AllReduce:
      return "all_reduce";
    case CollectiveKind::AllGather:
      return "all_gather";
    case CollectiveKind::ReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::Broadcast:
      return "broadcast";
    case CollectiveKind::Barrier:
      return "barrier";
    case CollectiveKind::Split:
      return "split";
  }
  return "unknown collective";
}

std::string_view argument_name(int64_t kind) {
  switch (static_cast<CollectiveKind>(kind)) {
    case CollectiveKind::AllReduce:
      return "op";
    case CollectiveKind::AllGather:
      return "dim";
    case CollectiveKind::ReduceScatter:
      return "dim";
    case CollectiveKind::Broadcast:
      return "root";
    default:
      return "";
  }
}

int normalise_dim(int dim, const Tensor& tensor, std::string_view collective, const Communicator& group) {
  const int ndim = tensor.ndim();
  const int normalised = dim < 0 ? dim + ndim : dim;
  RETORT_INPUT_CHECK(normalised >= 0 && normalised < ndim, "{} on {}: dim {} is out of range for {}", collective,
                     group.describe(), dim, tensor.describe());
  return normalised;
}

}  // namespace

std::string seconds_text(std::chrono::milliseconds duration) {
  return fmt::format("{:g} s", static_cast<double>(duration.count()) / 1000.0);
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
  }
  return "unknown";
}

CollectiveSignature CollectiveSignature::of(std::string_view collective, const Tensor& tensor, int64_t argument) {
  CollectiveSignature s;
  s.words[0] = static_cast<int64_t>(kind_of(collective));
  s.words[3] = argument;
  if (!tensor.defined()) {
    s.words[1] = s.words[2] = -1;
    return s;
  }
  s.words[1] = static_cast<int64_t>(tensor.dtype());
  s.words[2] = static_cast<int64_t>(tensor.device().kind);
  s.words[4] = tensor.ndim();
  s.words[5] = tensor.numel();
  // Tensors of more than kMaxDims dims compare by their leading dims and numel, which still catches the
  // mismatches that matter (a different element count or split).
  for (int d = 0; d < std::min(tensor.ndim(), kMaxDims); ++d) s.words[8 + d] = tensor.shape()[d];
  return s;
}

std::string CollectiveSignature::describe() const {
  std::string text(kind_name(words[0]));
  const auto arg = argument_name(words[0]);
  if (!arg.empty()) {
    text += arg == "op" ? fmt::format("({})", reduce_op_name(static_cast<ReduceOp>(words[3])))
                        : fmt::format("({}={})", arg, words[3]);
  }
  if (words[1] < 0) return text;
  Shape shape;
  for (int d = 0; d < std::min<int64_t>(words[4], kMaxDims); ++d) shape.push_back(words[8 + d]);
  return fmt::format("{} of {}{}{} (numel {})", text, dtype_name(static_cast<DType>(words[1])), shape_str(shape),
                     words[4] > kMaxDims ? "..." : "", words[5]);
}

std::string Communicator::describe() const {
  return fmt::format("{} group '{}' (rank {} of {})", backend(), name(), rank(), size());
}

std::string Communicator::signature_mismatch(const std::vector<CollectiveSignature>& all) const {
  const auto first_other =
      std::find_if(all.begin(), all.end(), [&](const CollectiveSignature& s) { return !(s == all.front()); });
  if (first_other == all.end()) return {};
  std::string lines;
  for (size_t r = 0; r < all.size(); ++r) lines += fmt::format("\n  rank {}: {}", r, all[r].describe());
  return fmt::format(
      "the ranks of {} group '{}' called different collectives or passed different shapes, dtypes or "
      "arguments:{}\nEvery rank must call the same collective with the same shape and dtype.",
      backend(), name(), lines);
}

void check_rank_in_group(int rank, int size, std::string_view what, const Communicator& group) {
  RETORT_INPUT_CHECK(rank >= 0 && rank < size, "{} {} is not a rank of {} (ranks 0..{})", what, rank, group.describe(),
                     size - 1);
}

Tensor Communicator::all_gather(const Tensor& input, int dim) {
  RETORT_INPUT_CHECK(input.defined(), "all_gather on {}: the input tensor is undefined", describe());
  const int d = normalise_dim(dim, input, "all_gather", *this);
  check_signatures(CollectiveSignature::of("all_gather", input, d));

  Shape out_shape = input.shape();
  out_shape[d] *= size();
  Tensor output = Tensor::empty(out_shape, input.dtype(), input.device());
  if (input.numel() == 0) return output;
  if (size() == 1) {
    output.copy_(input);
    return output;
  }
  const int64_t outer = shape_numel(Shape(input.shape().begin(), input.shape().begin() + d));
  if (outer == 1) {
    // Blocks along a leading dim are already the result's layout.
    all_gather_flat(input, output);
    return output;
  }
  Tensor blocks = Tensor::empty({static_cast<int64_t>(size()) * input.numel()}, input.dtype(), input.device());
  all_gather_flat(input, blocks);
  const size_t block_bytes = input.nbytes();
  const size_t row_bytes = block_bytes / static_cast<size_t>(outer);
  const auto* src = static_cast<const char*>(blocks.raw_data());
  auto* dst = static_cast<char*>(output.raw_data());
  for (int r = 0; r < size(); ++r) {
    device_runtime::copy_2d(dst + r * row_bytes, row_bytes * size(), src + r * block_bytes, row_bytes, row_bytes, outer,
                            input.device());
  }
  return output;
}

Tensor Communicator::reduce_scatter(const Tensor& input, int dim, ReduceOp op) {
  RETORT_INPUT_CHECK(input.defined(), "reduce_scatter on {}: the input tensor is undefined", describe());
  const int d = normalise_dim(dim, input, "reduce_scatter", *this);
  RETORT_INPUT_CHECK(input.shape()[d] % size() == 0,
                     "reduce_scatter on {}: dim {} of {} has size {}, which does not divide by the group size {}",
                     describe(), d, input.describe(), input.shape()[d], size());
  // The op rides in the spare word so ranks disagreeing on sum/max are caught too.
  auto signature = CollectiveSignature::of("reduce_scatter", input, d);
  signature.words[6] = static_cast<int64_t>(op);
  check_signatures(signature);

  Shape out_shape = input.shape();
  out_shape[d] /= size();
  Tensor output = Tensor::empty(out_shape, input.dtype(), input.device());
  if (input.numel() == 0) return output;
  if (size() == 1) {
    output.copy_(input);
    return output;
  }
  const int64_t outer = shape_numel(Shape(input.shape().begin(), input.shape().begin() + d));
  if (outer == 1) {
    reduce_scatter_flat(input, output, op);
    return output;
  }
  // Make each rank's chunk contiguous: the column band r of every outer row becomes block r.
  Tensor blocks = Tensor::empty({input.numel()}, input.dtype(), input.device());
  const size_t block_bytes = input.nbytes() / static_cast<size_t>(size());
  const size_t row_bytes = block_bytes / static_cast<size_t>(outer);
  const auto* src = static_cast<const char*>(input.raw_data());
  auto* dst = static_cast<char*>(blocks.raw_data());
  for (int r = 0; r < size(); ++r) {
    device_runtime::copy_2d(dst + r * block_bytes, row_bytes, src + r * row_bytes, row_bytes * size(), row_bytes, outer,
                            input.device());
  }
  reduce_scatter_flat(blocks, output, op);
  return output;
}

std::shared_ptr<Communicator> Communicator::new_group(const std::vector<int>& ranks) {
  RETORT_INPUT_CHECK(!ranks.empty(), "new_group on {}: the list of ranks is empty", describe());
  std::set<int> seen;
  for (int r : ranks) {
    check_rank_in_group(r, size(), "new_group: member", *this);
    RETORT_INPUT_CHECK(seen.insert(r).second, "new_group on {}: rank {} is listed twice", describe(), r);
  }
  const auto position = std::find(ranks.begin(), ranks.end(), rank());
  const bool member = position != ranks.end();
  return split(member ? 0 : -1, member ? static_cast<int>(position - ranks.begin()) : 0);
}

}  // namespace retort
