// The step-inputs kernel (kernels/step_inputs.cuh; ctest label gpu): the bytes
// it moves from pinned host staging are the staging's, over counts below, at
// and past what one block moves (4 x 256 elements), up to five blocks, with
// and without a device token over element 0; outputs poisoned first, and the
// element after the last one must stay poisoned. A replay from a graph reads
// what the host wrote before that replay, not what it held at capture. Memory
// that is not pinned is refused with one line. SKIPPED without a device.
#include <gtest/gtest.h>

#include "require_device.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#ifdef TRIFORCE_HAVE_CUDA
#include "device_buffer.cuh"
#include "step_inputs.cuh"
#endif

namespace {

#ifdef TRIFORCE_HAVE_CUDA
using tf::cuda::DeviceBuffer;

// Pinned host memory, freed on destruction.
template <class T> struct Pinned {
  T* p = nullptr;
  explicit Pinned(size_t n) { CUDA_CHECK(cudaMallocHost(&p, (n ? n : 1) * sizeof(T))); }
  ~Pinned() { cudaFreeHost(p); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

void fill(Pinned<int32_t>& ints, int64_t n_ints, Pinned<float>& rows, int64_t n_rows, uint32_t seed) {
  std::mt19937 g(seed);
  for (int64_t i = 0; i < n_ints; ++i) ints.p[i] = int32_t(g());
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t i = 0; i < n_rows; ++i) rows.p[i] = u(g);
}

// ints / rows as on the device, one element past each end included (the poison must survive there).
void expect_moved(const DeviceBuffer& dints, const DeviceBuffer& drows, const Pinned<int32_t>& ints, int64_t n_ints,
                  const Pinned<float>& rows, int64_t n_rows, const int32_t* token, const std::string& what) {
  std::vector<int32_t> gi(size_t(n_ints + 1));
  std::vector<uint32_t> gr(size_t(n_rows + 1));
  dints.download(gi.data(), gi.size() * sizeof(int32_t));
  drows.download(gr.data(), gr.size() * sizeof(uint32_t));
  for (int64_t i = 0; i < n_ints; ++i) {
    const int32_t want = i == 0 && token ? *token : ints.p[i];
    ASSERT_EQ(gi[size_t(i)], want) << what << ": int " << i;
  }
  for (int64_t i = 0; i < n_rows; ++i) {
    uint32_t want;
    std::memcpy(&want, &rows.p[i], 4);
    ASSERT_EQ(gr[size_t(i)], want) << what << ": row element " << i;
  }
  EXPECT_EQ(uint32_t(gi[size_t(n_ints)]), 0xFFFFFFFFu) << what << ": wrote past the ints";
  EXPECT_EQ(gr[size_t(n_rows)], 0xFFFFFFFFu) << what << ": wrote past the rows";
}
#endif

TEST(KernelsStepInputs, MovesTheStagedBytes) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  // (ints, rows): a one-token step of head_dim 64 and 128, a 32-token step, and counts around 1024 and 1024 + 256.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{3, 64},   {3, 128},  {96, 4096}, {1, 0},   {0, 5},
                                                           {7, 1017}, {1, 1023}, {2, 1022},  {3, 1278}, {1000, 300}};
  uint32_t seed = 1;
  for (const auto& [n_ints, n_rows] : shapes)
    for (bool with_token : {false, true}) {
      if (with_token && n_ints == 0) continue;
      Pinned<int32_t> ints{size_t(n_ints)};
      Pinned<float> rows{size_t(n_rows)};
      fill(ints, n_ints, rows, n_rows, seed++);
      DeviceBuffer dints(size_t(n_ints + 1) * 4), drows(size_t(n_rows + 1) * 4), dtoken(4);
      dints.poison(), drows.poison();
      const int32_t token = 123456789;
      dtoken.upload(&token, 4);
      tf::cuda::StepInputsParams p;
      p.ints_host = ints.p, p.ints = dints.as<int32_t>(), p.n_ints = n_ints;
      p.rows_host = rows.p, p.rows = drows.as<float>(), p.n_rows = n_rows;
      p.token = with_token ? dtoken.as<int32_t>() : nullptr;
      tf::cuda::step_inputs(p, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      expect_moved(dints, drows, ints, n_ints, rows, n_rows, with_token ? &token : nullptr,
                   "ints " + std::to_string(n_ints) + " rows " + std::to_string(n_rows) + " token " +
                       std::to_string(with_token));
    }
#endif
}

TEST(KernelsStepInputs, GraphReplayReadsTheStagingOfItsReplay) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const int64_t n_ints = 3, n_rows = 64;
  Pinned<int32_t> ints(n_ints);
  Pinned<float> rows(n_rows);
  DeviceBuffer dints(size_t(n_ints + 1) * 4), drows(size_t(n_rows + 1) * 4);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  tf::cuda::StepInputsParams p;
  p.ints_host = ints.p, p.ints = dints.as<int32_t>(), p.n_ints = n_ints;
  p.rows_host = rows.p, p.rows = drows.as<float>(), p.n_rows = n_rows;
  fill(ints, n_ints, rows, n_rows, 99);
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  tf::cuda::step_inputs(p, s);
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (uint32_t replay = 0; replay < 3; ++replay) {
    fill(ints, n_ints, rows, n_rows, 1000 + replay);  // new staging after the capture, before each replay
    dints.poison(), drows.poison();
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    expect_moved(dints, drows, ints, n_ints, rows, n_rows, nullptr, "replay " + std::to_string(replay));
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(s));
#endif
}

TEST(KernelsStepInputs, RefusesMemoryThatIsNotPinned) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  std::vector<int32_t> pageable(3, 7);
  DeviceBuffer dints(16);
  tf::cuda::StepInputsParams p;
  p.ints_host = pageable.data(), p.ints = dints.as<int32_t>(), p.n_ints = 3;
  try {
    tf::cuda::step_inputs(p, nullptr);
    FAIL() << "pageable staging was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the staged ints is not pinned host memory"), std::string::npos) << e.what();
  }
#endif
}

}  // namespace
