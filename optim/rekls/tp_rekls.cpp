#include "optim/rekls/tp_rekls.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/autograd/grad_mode.h"
#include "core/util/error.h"
#include "optim/rekls/eigh.h"
#include "optim/rekls/rekls.h"
#include "parallel/tp/sharding.h"

namespace retort::optim {

namespace {

// Owners for factors of the given sizes: largest first to the least loaded rank (cost k^3, the eigh cost), ties
// to the lower rank. Every rank computes the same list from the same sizes.
std::vector<int> balance_owners(const std::vector<int64_t>& sizes, int tp) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<double> load(static_cast<size_t>(tp), 0.0);
  std::vector<int> owners(sizes.size(), 0);
  for (size_t f : order) {
    const int rank = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owners[f] = rank;
    load[static_cast<size_t>(rank)] += static_cast<double>(sizes[f]) * sizes[f] * sizes[f];
  }
  return owners;
}

// The rows of a basis that belong to this rank's shard of a weight split along that basis' dimension (with the
// weight's block layout, e.g. a fused q|k|v projection).
Tensor basis_rows_of_shard(const Tensor& basis, int blocks, int tp_rank, int tp_size) {
  ShardingSpec rows;
  rows.partition_dim = 0;
  rows.blocks = blocks;
  return tp::shard_of(basis, rows, tp_rank, tp_size);
}

}  // namespace

TpRekls::TpRekls(std::vector<ParamGroup> groups, ReklsOptions options, std::shared_ptr<Communicator> group)
    : Optimizer(std::move(groups)), options_(options), group_(std::move(group)) {
  if (group_) {
    tp_size_ = group_->size();
    tp_rank_ = group_->rank();
  }
  std::vector<int64_t> factor_sizes;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      const auto& [name, p] = groups_[gi].params[pi];
      RETORT_INPUT_CHECK(p.ndim() == 2 && p.dtype() == DType::F32,
                         "TP-REKLS preconditions f32 matrices only, but parameter '{}' is {}: route it to AdamW "
                         "(make_rekls_optimizer does so for every tensor that is not 2-D)",
                         name, p.describe());
      const ShardingSpec& spec = p.sharding();
      RETORT_INPUT_CHECK(
          !spec.is_sharded() || spec.group == group_ || tp_size_ == 1 || (spec.group && spec.group->size() == 1),
          "TP-REKLS: parameter '{}' is sharded over {}, not over the optimizer's group {}: give "
          "TP-REKLS the tensor-parallel group the model was built with",
          name, spec.group->describe(), group_ ? group_->describe() : std::string("(none)"));
      const Shape full = spec.is_sharded() ? tp::full_shape(p.shape(), spec, tp_size_) : p.shape();
      tp::check_divides(full[0], tp_size_, fmt::format("TP-REKLS: parameter '{}' full rows", name));
      tp::check_divides(full[1], tp_size_, fmt::format("TP-REKLS: parameter '{}' full columns", name));
      Slot slot;
      slot.group = gi;
      slot.param = pi;
      slot.rows = full[0];
      slot.cols = full[1];
      const int64_t left_rows = full[0] / tp_size_, right_rows = full[1] / tp_size_;
      slot.state = make_rekls_state(full[0], full[1], left_rows, tp_rank_ * left_rows, right_rows,
                                    tp_rank_ * right_rows, p.device());
      slots_.push_back(std::move(slot));
      factor_sizes.push_back(full[0]);
      factor_sizes.push_back(full[1]);
    }
  }
  owners_ = balance_owners(factor_sizes, tp_size_);
}

Tensor TpRekls::full_gradient(const Slot& slot) const {
  const Tensor& p = groups_[slot.group].params[slot.param].second;
  const ShardingSpec& spec = p.sharding();
  if (tp_size_ == 1 || !spec.is_sharded()) return p.grad();
  return tp::gather_full(p.grad(), spec);
}

std::vector<Tensor> TpRekls::assemble_rows(const std::vector<Tensor>& chunks, const std::vector<int64_t>& sizes,
                                           const std::vector<bool>& wanted) const {
  if (tp_size_ == 1) return chunks;
  // One all-gather of every chunk packed end to end; matrix f's rank-r rows then sit at r * packed + offset[f].
  const size_t count = chunks.size();
  std::vector<int64_t> offset(count + 1, 0);
  for (size_t f = 0; f < count; ++f) offset[f + 1] = offset[f] + chunks[f].numel();
  const int64_t packed_size = offset[count];
  Tensor packed = Tensor::empty({packed_size}, DType::F32, chunks[0].device());
  for (size_t f = 0; f < count; ++f) {
    Tensor slot_view = packed.rows(offset[f], chunks[f].numel());
    slot_view.copy_(chunks[f].view({chunks[f].numel()}));
  }
  const Tensor gathered = group_->all_gather(packed, 0);
  std::vector<Tensor> full(count);
  for (size_t f = 0; f < count; ++f) {
    if (!wanted[f]) continue;
    const int64_t k = sizes[f], chunk = chunks[f].numel();
    full[f] = Tensor::empty({k, k}, DType::F32, packed.device());
    Tensor flat = full[f].view({k * k});
    for (int r = 0; r < tp_size_; ++r) {
      Tensor rows = flat.rows(r * chunk, chunk);
      rows.copy_(gathered.rows(r * packed_size + offset[f], chunk));
    }
  }
  return full;
}

void TpRekls::decompose_and_share(const std::vector<Tensor>& factors, const std::vector<int64_t>& sizes,
                                  const std::vector<int>& owner, Device device, std::vector<Tensor>& bases,
                                  std::vector<Tensor>& eigenvalues) {
  const size_t count = factors.size();
  // This rank's factors, batched by size (equal sizes are common: every layer's factors match).
  bases.assign(count, Tensor());
  eigenvalues.assign(count, Tensor());
  std::map<int64_t, std::vector<size_t>> owned_by_size;
  for (size_t f = 0; f < count; ++f)
    if (owner[f] == tp_rank_) owned_by_size[sizes[f]].push_back(f);
  for (const auto& [k, list] : owned_by_size) {
    if (list.size() == 1) {
      EighResult r = eigh(factors[list[0]]);
      bases[list[0]] = r.eigenvectors;
      eigenvalues[list[0]] = r.eigenvalues;
    } else {
      const int64_t b = static_cast<int64_t>(list.size());
      Tensor stack = Tensor::empty({b, k, k}, DType::F32, device);
      for (int64_t i = 0; i < b; ++i) {
        Tensor slot_view = stack.view({b * k, k}).rows(i * k, k);
        slot_view.copy_(factors[list[static_cast<size_t>(i)]]);
      }
      EighResult r = eigh_batched(stack);
      for (int64_t i = 0; i < b; ++i) {
        bases[list[static_cast<size_t>(i)]] = r.eigenvectors.view({b * k, k}).rows(i * k, k).clone();
        eigenvalues[list[static_cast<size_t>(i)]] = r.eigenvalues.rows(i, 1).view({k}).clone();
      }
    }
    eigh_calls_last_step_ += static_cast<int64_t>(list.size());
  }
  if (tp_size_ == 1) return;

  // Every owner's results to every rank: one broadcast per rank that owns anything.
  for (int root = 0; root < tp_size_; ++root) {
    int64_t packed_size = 0;
    for (size_t f = 0; f < count; ++f)
      if (owner[f] == root) packed_size += sizes[f] + sizes[f] * sizes[f];
    if (packed_size == 0) continue;
    Tensor packed = Tensor::empty({packed_size}, DType::F32, device);
    int64_t at = 0;
    for (size_t f = 0; f < count; ++f) {
      if (owner[f] != root) continue;
      const int64_t k = sizes[f];
      if (root == tp_rank_) {
        Tensor values_view = packed.rows(at, k), basis_view = packed.rows(at + k, k * k);
        values_view.copy_(eigenvalues[f]);
        basis_view.copy_(bases[f].view({k * k}));
      }
      at += k + k * k;
    }
    group_->broadcast(packed, root);
    if (root == tp_rank_) continue;
    at = 0;
    for (size_t f = 0; f < count; ++f) {
      if (owner[f] != root) continue;
      const int64_t k = sizes[f];
      eigenvalues[f] = packed.rows(at, k).clone();
      bases[f] = packed.rows(at + k, k * k).clone().view({k, k});
      at += k + k * k;
    }
  }
}

void TpRekls::update(double lr) {
  NoGradGuard no_grad;
  ++step_;
  eigh_calls_last_step_ = 0;
  std::vector<size_t> active;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (groups_[slots_[i].group].params[slots_[i].param].second.grad().defined()) active.push_back(i);
  if (active.empty()) return;
  const double bhat = shampoo_blend(options_.shampoo_beta, step_);

  // Matrix f = 2 * i + side (0 left, 1 right) of active parameter i.
  const size_t count = 2 * active.size();
  std::vector<int64_t> sizes(count);
  std::vector<int> owner(count);
  std::vector<Tensor> basis_chunks(count), factor_chunks(count);
  for (size_t i = 0; i < active.size(); ++i) {
    const Slot& slot = slots_[active[i]];
    sizes[2 * i] = slot.rows;
    sizes[2 * i + 1] = slot.cols;
    owner[2 * i] = owners_[2 * active[i]];
    owner[2 * i + 1] = owners_[2 * active[i] + 1];
    basis_chunks[2 * i] = slot.state.left_basis;
    basis_chunks[2 * i + 1] = slot.state.right_basis;
  }

  // The last step's whole eigenbases (kept as row chunks between steps), then this rank's rows of L and R.
  const std::vector<Tensor> old_bases = assemble_rows(basis_chunks, sizes, std::vector<bool>(count, true));
  std::vector<Tensor> grads(active.size());
  for (size_t i = 0; i < active.size(); ++i) {
    Slot& slot = slots_[active[i]];
    grads[i] = full_gradient(slot);
    update_factor_chunks(grads[i], {old_bases[2 * i], old_bases[2 * i + 1]}, slot.state, bhat, options_.eps);
    factor_chunks[2 * i] = slot.state.left_factor;
    factor_chunks[2 * i + 1] = slot.state.right_factor;
  }

  // The whole factors on their owners, decomposed there, the results on every rank.
  std::vector<bool> owned(count);
  for (size_t f = 0; f < count; ++f) owned[f] = owner[f] == tp_rank_;
  const std::vector<Tensor> factors = assemble_rows(factor_chunks, sizes, owned);
  std::vector<Tensor> bases, eigenvalues;
  decompose_and_share(factors, sizes, owner, grads[0].device(), bases, eigenvalues);

  for (size_t i = 0; i < active.size(); ++i) {
    Slot& slot = slots_[active[i]];
    ReklsParamState& s = slot.state;
    const ReklsBases old{old_bases[2 * i], old_bases[2 * i + 1]}, fresh{bases[2 * i], bases[2 * i + 1]};
    rotate_into_new_basis(s, old, fresh, eigenvalues[2 * i], eigenvalues[2 * i + 1]);
    const Tensor direction = rotated_adam_direction(grads[i], fresh, s, options_, step_);
    Tensor& p = groups_[slot.group].params[slot.param].second;
    const ShardingSpec& spec = p.sharding();
    const bool split = tp_size_ > 1 && spec.is_sharded();
    const Tensor left_rows = split && spec.partition_dim == 0
                                 ? basis_rows_of_shard(fresh.left, spec.blocks, tp_rank_, tp_size_)
                                 : fresh.left;
    const Tensor right_rows = split && spec.partition_dim == 1
                                  ? basis_rows_of_shard(fresh.right, spec.blocks, tp_rank_, tp_size_)
                                  : fresh.right;
    apply_rekls_update(p, direction, left_rows, right_rows, lr, groups_[slot.group].weight_decay);
  }
}

OptimizerState TpRekls::state() const {
  OptimizerState out;
  out.metadata["optimizer"] = name();
  out.metadata["step"] = std::to_string(step_);
  out.metadata["tp"] = std::to_string(tp_size_);
  for (const Slot& slot : slots_)
    export_rekls_state(groups_[slot.group].params[slot.param].first + ".", slot.state, out.tensors);
  return out;
}

void TpRekls::load_state(const OptimizerState& state) {
  const int64_t step = check_optimizer_metadata(state, name());
  auto tp = state.metadata.find("tp");
  RETORT_INPUT_CHECK(tp != state.metadata.end() && std::stoi(tp->second) == tp_size_,
                     "TP-REKLS state was written at parallel.tp = {} but this run has tp = {}: resume with the same tp",
                     tp == state.metadata.end() ? "unknown" : tp->second, tp_size_);
  std::map<std::string, Tensor> by_name(state.tensors.begin(), state.tensors.end());
  for (Slot& slot : slots_) import_rekls_state(groups_[slot.group].params[slot.param].first + ".", by_name, slot.state);
  step_ = step;
}

}  // namespace retort::optim
