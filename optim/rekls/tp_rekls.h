#pragma once
// TP-REKLS: REKLS on parameters sharded by the tensor-parallel layers (each tensor's ShardingSpec: rows
// (partition_dim 0), columns (1) or replicated), giving every rank's shard the matching chunk of what REKLS
// gives the full matrix.
//
// Per rank and parameter [m, n] (full sizes; both must divide by tp):
//   state  M, V [m, n] in the eigenbasis (replicated); L, R and the last step's eigenbases QL, QR as row chunks
//          [m / tp, m], [n / tp, n]; the eigenvalues (replicated, small).
//   step   gather the gradient; one packed all-gather of every parameter's basis chunks rebuilds the kept
//          eigenbasis; this rank's rows of L and R are updated from it (only those rows of G CR G^T and
//          G^T CL G are formed); one packed all-gather of every L and R chunk; each factor is decomposed by ONE
//          owner rank (ownership balanced by k^3 over the group, equal sizes batched) and its results are
//          broadcast from there, so all ranks hold the same bits by construction; then the moment rotation and
//          Adam in the eigenbasis on the full matrices, and only this rank's rows (or columns) of QL U' QR^T
//          are formed and applied.
// Against the anchor (Emerging-Optimizers' TpRekls: 4 eigh per parameter on every rank, 3 all-gathers per
// parameter) that is 2 eigh per parameter in the whole group instead of 4 tp, one gradient all-gather per
// parameter plus 2 packed all-gathers and up to tp broadcasts per step, and 1/tp of the factor and final-update
// GEMMs. The persistent state per rank is the anchor's plus the basis chunks (the eigenvalues are tiny).
#include <memory>

#include "optim/optimizer.h"
#include "optim/rekls/rekls_math.h"
#include "parallel/comm/communicator.h"

namespace retort::optim {

class TpRekls : public Optimizer {
 public:
  // group: the tensor-parallel group every sharded parameter is split over (null: one rank). Every parameter
  // must be 2-D f32, sharded over `group` or replicated; its full sizes must divide by the group size.
  TpRekls(std::vector<ParamGroup> groups, ReklsOptions options, std::shared_ptr<Communicator> group);
  void update(double lr) override;
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;
  std::string name() const override { return "tp_rekls"; }
  int64_t steps() const { return step_; }
  // Eigendecompositions THIS rank ran in the last step; over the group they add up to 2 per parameter.
  int64_t eigh_calls_last_step() const { return eigh_calls_last_step_; }
  // The rank that decomposes parameter `index`'s (in group order, all groups flattened) left or right factor.
  int factor_owner(size_t index, bool left) const { return owners_.at(2 * index + (left ? 0 : 1)); }

 private:
  struct Slot {
    size_t group = 0, param = 0;
    int64_t rows = 0, cols = 0;  // full sizes
    ReklsParamState state;
  };
  Tensor full_gradient(const Slot& slot) const;
  // Whole [k, k] matrices from every rank's row chunk (one packed all-gather; every rank takes part), built
  // only where `wanted`.
  std::vector<Tensor> assemble_rows(const std::vector<Tensor>& chunks, const std::vector<int64_t>& sizes,
                                    const std::vector<bool>& wanted) const;
  // eigh of the factors this rank owns (batched by size), then every owner's results broadcast to all ranks.
  void decompose_and_share(const std::vector<Tensor>& factors, const std::vector<int64_t>& sizes,
                           const std::vector<int>& owner, Device device, std::vector<Tensor>& bases,
                           std::vector<Tensor>& eigenvalues);

  ReklsOptions options_;
  std::shared_ptr<Communicator> group_;
  int tp_size_ = 1, tp_rank_ = 0;
  int64_t step_ = 0;
  int64_t eigh_calls_last_step_ = 0;
  std::vector<Slot> slots_;
  std::vector<int> owners_;  // per factor: 2 * slot + (0 left, 1 right)
};

}  // namespace retort::optim
