// Every tensor-parallel layer at tp 1, 2, 4 and 8 (Gloo thread ranks) against float64 math written here: the
// forward output equals the dense result (or this rank's slice of it), and each rank's LOCAL gradients equal
// the matching slices of the dense gradients. The layers compute in f64 (compute_dtype), their f32 master
// weights receive f32 gradients, hence the 1e-6 tolerance on weights and 1e-12 on f64 activations.
#include <gtest/gtest.h>

#include "core/ops/ops.h"
#include "parallel/process_grid.h"
#include "parallel/tp/layers.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/tp/tp_test_support.h"

namespace retort {
namespace {

using comm_testing::on_ranks;
using namespace tp_testing;

constexpr double kActTol = 1e-12, kParamTol = 1e-6;

void set_param(const Tensor& param, const Mat& value) {
  Tensor handle = param;
  handle.copy_(to_tensor(value).view(param.shape()));
}

Mat bias_row(const Mat& b_col) {  // [n, 1] -> [1, n]
  Mat r(1, b_col.rows);
  r.v = b_col.v;
  return r;
}

Mat column_sums(const Mat& m) {
  Mat s(1, m.cols);
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) s.at(0, j) += m.at(i, j);
  return s;
}

// sum(y * r): backpropagating it seeds dL/dy = r.
Tensor dot_loss(const Tensor& y, const Mat& r) {
  return ops::sum(ops::mul(y, to_tensor(r, DType::F64).view(y.shape())));
}

Tensor input(const Mat& x) {
  Tensor t = to_tensor(x, DType::F64);
  t.set_requires_grad();
  return t;
}

TEST(TpLayers, ColumnParallelLinearMatchesDenseSlices) {
  const int64_t rows = 5, in = 12, out = 24;
  const Mat x = random_mat(rows, in, 1), w = random_mat(out, in, 2, 0.3), b = random_mat(out, 1, 3),
            r = random_mat(rows, out, 4);
  Mat y = matmul_nt(x, w);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < out; ++j) y.at(i, j) += b.at(j, 0);
  const Mat dw = matmul_tn(r, x), db = column_sums(r), dx = matmul_nn(r, w);
  for (int tp : kTpSizes) {
    for (int blocks : {1, 3}) {
      for (bool gather : {false, true}) {
        if (gather && blocks > 1) continue;
        SCOPED_TRACE(fmt::format("tp {} blocks {} gather_output {}", tp, blocks, gather));
        on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
          const int rank = group->rank();
          tp::ColumnParallelLinear layer(in, out, true, group, gather, blocks);
          ASSERT_EQ(layer.weight().shape(), (Shape{out / tp, in}));
          EXPECT_EQ(layer.weight().sharding().partition_dim, 0);
          EXPECT_EQ(layer.weight().sharding().blocks, blocks);
          set_param(layer.weight(), shard(w, true, blocks, rank, tp));
          set_param(layer.named_parameters()[1].second, shard(bias_row(b), false, blocks, rank, tp));
          Tensor xt = input(x);
          Tensor yt = layer.forward(xt, DType::F64);
          const Mat r_mine = gather ? r : shard(r, false, blocks, rank, tp);
          expect_close(yt, gather ? y : shard(y, false, blocks, rank, tp), kActTol, "output");
          dot_loss(yt, r_mine).backward();
          expect_close(layer.weight().grad(), shard(dw, true, blocks, rank, tp), kParamTol, "weight grad");
          expect_close(layer.named_parameters()[1].second.grad(), shard(db, false, blocks, rank, tp), kParamTol,
                       "bias grad");
          expect_close(xt.grad(), dx, kActTol, "input grad (full on every rank)");
        });
      }
    }
  }
}

TEST(TpLayers, RowParallelLinearMatchesDenseSlices) {
  const int64_t rows = 5, in = 16, out = 6;
  const Mat x = random_mat(rows, in, 11), w = random_mat(out, in, 12, 0.3), b = random_mat(out, 1, 13),
            r = random_mat(rows, out, 14);
  Mat y = matmul_nt(x, w);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < out; ++j) y.at(i, j) += b.at(j, 0);
  const Mat dw = matmul_tn(r, x), db = column_sums(r), dx = matmul_nn(r, w);
  for (int tp : kTpSizes) {
    for (bool parallel_input : {true, false}) {
      SCOPED_TRACE(fmt::format("tp {} input_is_parallel {}", tp, parallel_input));
      on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        tp::RowParallelLinear layer(in, out, true, group, parallel_input);
        ASSERT_EQ(layer.weight().shape(), (Shape{out, in / tp}));
        set_param(layer.weight(), shard(w, false, 1, rank, tp));
        set_param(layer.named_parameters()[1].second, bias_row(b));
        Tensor xt = input(parallel_input ? shard(x, false, 1, rank, tp) : x);
        Tensor yt = layer.forward(xt, DType::F64);
        expect_close(yt, y, kActTol, "output (full on every rank)");
        dot_loss(yt, r).backward();
        expect_close(layer.weight().grad(), shard(dw, false, 1, rank, tp), kParamTol, "weight grad");
        expect_close(layer.named_parameters()[1].second.grad(), db, kParamTol, "bias grad (replicated)");
        expect_close(xt.grad(), parallel_input ? shard(dx, false, 1, rank, tp) : dx, kActTol, "input grad");
      });
    }
  }
}

TEST(TpLayers, VocabParallelEmbeddingMatchesDenseSlices) {
  const int64_t vocab = 16, dim = 6, n = 14;
  const Mat table = random_mat(vocab, dim, 21), r = random_mat(n, dim, 22);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
  ids[5] = ids[9] = 2;  // a repeated id: its gradient rows add up
  Mat y(n, dim), dtable(vocab, dim);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) {
      y.at(i, j) = table.at(ids[i], j);
      dtable.at(ids[i], j) += r.at(i, j);
    }
  for (int tp : kTpSizes) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
      const int rank = group->rank();
      tp::VocabParallelEmbedding layer(vocab, dim, group);
      EXPECT_EQ(layer.vocab_start(), rank * vocab / tp);
      set_param(layer.weight(), shard(table, true, 1, rank, tp));
      Tensor yt = layer.forward(Tensor::from_ints(ids, {2, n / 2}));
      ASSERT_EQ(yt.shape(), (Shape{2, n / 2, dim}));
      expect_close(yt, y, 0.0, "rows (full on every rank)");
      ops::sum(ops::mul(yt, to_tensor(r).view(yt.shape()))).backward();
      expect_close(layer.weight().grad(), shard(dtable, true, 1, rank, tp), kParamTol, "table grad");
    });
  }
}

TEST(TpLayers, VocabParallelLogitsStayShardedAndTagged) {
  const int64_t rows = 6, dim = 8, vocab = 24;
  const Mat x = random_mat(rows, dim, 31), w = random_mat(vocab, dim, 32, 0.5), r = random_mat(rows, vocab, 33);
  const Mat logits = matmul_nt(x, w), dw = matmul_tn(r, x), dx = matmul_nn(r, w);
  for (int tp : kTpSizes) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    on_ranks(tp, [&](std::shared_ptr<Communicator> group) {
      const int rank = group->rank();
      Tensor weight = to_tensor(shard(w, true, 1, rank, tp));
      weight.set_requires_grad();
      Tensor xt = input(x);
      Tensor lt = tp::vocab_parallel_logits(xt, weight, group, DType::F64);
      ASSERT_EQ(lt.shape(), (Shape{rows, vocab / tp}));
      if (tp > 1) {
        EXPECT_EQ(lt.sharding().partition_dim, 1);
        EXPECT_EQ(lt.sharding().group.get(), group.get());
      } else {
        EXPECT_FALSE(lt.sharding().is_sharded());
      }
      expect_close(lt, shard(logits, false, 1, rank, tp), kActTol, "logits shard");
      dot_loss(lt, shard(r, false, 1, rank, tp)).backward();
      expect_close(weight.grad(), shard(dw, true, 1, rank, tp), kParamTol, "weight grad");
      expect_close(xt.grad(), dx, kActTol, "input grad");
    });
  }
}

TEST(TpLayers, ShapesThatDoNotDivideAreClearErrors) {
  on_ranks(4, [](std::shared_ptr<Communicator> group) {
    try {
      tp::VocabParallelEmbedding layer(10, 4, group);
      ADD_FAILURE() << "a vocabulary of 10 over 4 ranks was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("= 10 does not divide by parallel.tp = 4"), std::string::npos) << e.what();
    }
    EXPECT_THROW(tp::RowParallelLinear(6, 4, false, group), InputError);
    EXPECT_THROW(tp::ColumnParallelLinear(4, 6, false, group, false, 3), InputError);  // 2 rows a block
    group->barrier();  // no rank leaves (closing its connections) before every rank has connected
  });
}

TEST(ProcessGrid, TpIsInnermostAndGroupsReduceOverTheRightRanks) {
  for (auto [world, tp] :
       std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {2, 1}, {4, 2}, {4, 4}, {4, 1}, {8, 2}, {8, 4}, {8, 8}}) {
    SCOPED_TRACE(fmt::format("world {} tp {}", world, tp));
    on_ranks(world, [world, tp](std::shared_ptr<Communicator> comm) {
      const ProcessGrid grid = make_process_grid(comm, tp);
      const int rank = comm->rank();
      EXPECT_EQ(grid.tp_size, tp);
      EXPECT_EQ(grid.dp_size, world / tp);
      EXPECT_EQ(grid.tp_rank, rank % tp);
      EXPECT_EQ(grid.dp_rank, rank / tp);
      ASSERT_EQ(grid.tp->size(), tp);
      ASSERT_EQ(grid.dp->size(), world / tp);
      EXPECT_EQ(grid.tp->rank(), grid.tp_rank);
      EXPECT_EQ(grid.dp->rank(), grid.dp_rank);
      // The sum of world ranks over my tp group is the sum of its consecutive members.
      Tensor t = Tensor::from_doubles({static_cast<double>(rank)}, {1});
      grid.tp->all_reduce(t);
      const int first = grid.dp_rank * tp;
      EXPECT_EQ(t.item(), tp * first + tp * (tp - 1) / 2);
      Tensor d = Tensor::from_doubles({static_cast<double>(rank)}, {1});
      grid.dp->all_reduce(d);
      double want = 0;
      for (int k = 0; k < world / tp; ++k) want += k * tp + grid.tp_rank;
      EXPECT_EQ(d.item(), want);
    });
  }
  on_ranks(3, [](std::shared_ptr<Communicator> comm) {
    try {
      make_process_grid(comm, 2);
      ADD_FAILURE() << "tp 2 over 3 ranks was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.tp = 2 does not divide the world of 3 ranks"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace retort
