// CUDA graphs on the tensor-parallel path: the NCCL allreduces of the o and
// down projections are captured inside the step graphs. Graph and eager runs
// of the same shard give bit-identical logits, step by step. One process runs
// a 1-rank NCCL communicator (plain ctest, or mpirun -np 1); under mpirun -np N
// (one GPU per rank, NCCL_NVLS_ENABLE=0) each rank runs its shard of the
// gqa_f32 fixture (N must divide its 2 KV heads). Each also with the step's
// programmatic dependent launch (StepFusions::pdl) in the graph run: the
// kernel after an allreduce launches normally, and the bits are the plain
// eager run's.
#include <gtest/gtest.h>

#include "skip_exit_code.h"

#include <cmath>
#include <cstring>

#include "parallel/launch.h"
#include "require_device.h"

#ifdef TRIFORCE_HAVE_CUDA
#include "core/device.h"
#include "device_release.cuh"
#include "parallel/nccl_bootstrap.h"
#include "parallel/tensor_parallel.h"
#include "io/npy.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "model/weights_device.h"
#include "ops/ops.h"

using namespace tf;

namespace {

// Not a static object (ncclCommDestroy at exit can hang): destroyed after the last test, before
// MPI_Finalize, by release_device_state (require_device.h), as in the CLI.
parallel::Communicator* g_comm = nullptr;
void release_comm() {
  delete g_comm;
  g_comm = nullptr;
}
parallel::Communicator* nccl() {
  if (!g_comm) {
    g_comm = parallel::make_nccl_communicator(nullptr).release();
    cuda::at_device_release(release_comm);
  }
  return g_comm;
}

// The graph model with PDL on or off; the eager one always plain.
void use_pdl(LlamaModel& graph, LlamaModel& eager, bool pdl) {
  StepFusions f = graph.step_fusions();
  f.pdl = pdl;
  graph.set_step_fusions(f);
  f.pdl = false;
  eager.set_step_fusions(f);
}

void compare_steps(LlamaModel& graph, LlamaModel& eager, const std::vector<int32_t>& prompt, int64_t head) {
  const int64_t overlapped = ops::step_overlapped_launches();
  auto cg = graph.make_cache(int64_t(prompt.size()) + 8), ce = eager.make_cache(int64_t(prompt.size()) + 8);
  const std::vector<int32_t> first(prompt.begin(), prompt.begin() + head);
  Tensor a = graph.forward(first, cg, 1), b = eager.forward(first, ce, 1);
  ASSERT_EQ(std::memcmp(a.data, b.data, a.bytes()), 0) << "prefill";
  for (int64_t i = head; i < int64_t(prompt.size());) {
    const int64_t m = std::min<int64_t>(int64_t(prompt.size()) - i, i % 4 == 0 ? 7 : 1);
    const std::vector<int32_t> part(prompt.begin() + i, prompt.begin() + i + m);
    Tensor x = graph.forward(part, cg), y = eager.forward(part, ce);
    ASSERT_EQ(x.shape, y.shape);
    for (int64_t j = 0; j < x.numel(); ++j) ASSERT_TRUE(std::isfinite(x.ptr<float>()[j])) << j;
    ASSERT_EQ(std::memcmp(x.data, y.data, x.bytes()), 0) << "step at " << i << " of " << m << " tokens";
    i += m;
  }
  EXPECT_GT(graph.step_graphs().replays(), 10) << "no graph was replayed";
  EXPECT_GT(graph.step_graphs().captures(), 0);
  if (graph.step_fusions().pdl) EXPECT_GT(ops::step_overlapped_launches(), overlapped) << "no launch overlapped";
}

}  // namespace

TEST(CudaGraphsTp, ShardedFixtureGraphEqualsEager) {
  REQUIRE_DEVICE();
  parallel::Communicator* comm = nccl();
  const std::string dir = std::string(TF_FIXTURES) + "/hf/gqa_f32";
  Checkpoint ck = open_checkpoint(dir);
  if (ck.config.num_kv_heads % comm->size() != 0) GTEST_SKIP() << "TP " << comm->size() << " does not divide the KV heads";
  const ShardSpec shard = parallel::tp_shard(ck.config, dir);
  const LlamaWeights w = upload_weights(LlamaWeights::load(*ck.weights, ck.config, shard), Device::CUDA, DType::BF16);
  const Tensor pt = read_npy(dir + "/prompt.npy");
  for (bool pdl : {false, true}) {
    SCOPED_TRACE(pdl ? "pdl on" : "pdl off");
    LlamaModel graph(ck.config, w, 64, comm), eager(ck.config, w, 64, comm);
    graph.set_cuda_graphs(true);
    eager.set_cuda_graphs(false);
    use_pdl(graph, eager, pdl);
    compare_steps(graph, eager, std::vector<int32_t>(pt.ptr<int32_t>(), pt.ptr<int32_t>() + pt.numel()), 100);
  }
}

TEST(CudaGraphsTp, SyntheticSmolLM2OneRank) {
  REQUIRE_DEVICE();
  parallel::Communicator* comm = nccl();
  if (comm->size() != 1) GTEST_SKIP() << "synthetic models are not sharded";
  const ModelConfig cfg = synthetic_config("synthetic:smollm2-135m");
  const LlamaWeights w = synthetic_weights(cfg, Device::CUDA, DType::BF16, 5);
  std::vector<int32_t> prompt(620);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 3) % size_t(cfg.vocab_size));
  for (bool pdl : {false, true}) {
    SCOPED_TRACE(pdl ? "pdl on" : "pdl off");
    LlamaModel graph(cfg, w, 512, comm), eager(cfg, w, 512, comm);
    graph.set_cuda_graphs(true);
    eager.set_cuda_graphs(false);
    use_pdl(graph, eager, pdl);
    compare_steps(graph, eager, prompt, 480);  // decode across the 512-slot split
  }
}
#else
TEST(CudaGraphsTp, ShardedFixtureGraphEqualsEager) { REQUIRE_DEVICE(); }
#endif

int main(int argc, char** argv) {
  tf::parallel::init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = tf::testing::skip_exit_code(RUN_ALL_TESTS());
  tf::parallel::finalize();
  return rc;
}
