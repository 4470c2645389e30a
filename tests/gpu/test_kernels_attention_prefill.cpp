// Causal prefill attention kernels (ctest label gpu) against a CPU reference in
// double precision on the same dtype-rounded inputs: n queries at the last n
// of kv_length slots, n in {1, 3, 127, 129, 4097} and long cases up to
// 65537, head_dim 64/128, MHA and GQA, f16 and bf16, on the mma.sync kernel,
// (head_dim 128 on an sm_90 device) the wgmma kernel and (in a build with
// cuDNN, on a device where it runs) cuDNN's fused attention. The output is
// poisoned with NaN before launch and the cache slots past kv_length hold NaN,
// so a missing write or a read past the length shows up; every output element
// must be finite. Huge cases check a sample of query rows (every head) on the
// CPU. The structured cases (one-hot Q/K, V encoding slot and dim) make a
// fragment-layout bug readable from the first mismatch.
// SKIPPED without CUDA or without a device.
#include <gtest/gtest.h>

#include "random_data.h"
#include "require_device.h"
#include "sanitizer_shapes.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <limits>
#include <thread>
#include <vector>

#include "core/tensor.h"

#ifdef TRIFORCE_HAVE_CUDA
#include "attention_prefill.cuh"
#include "attention_prefill_cudnn.cuh"
#include "core/cudnn_config_tag.h"
#include "device_buffer.cuh"
#endif

namespace {

using tf::DType;

struct Case {
  int64_t n, kv, D, H, KH;
  DType dt;
  int64_t max_checked_rows = 600;  // query rows checked on the CPU (all when n is at most this)
  int config = 0;                  // attention_prefill_config: 0 default, kPrefillMma, kPrefillWgmma...
  bool structured = false;         // one-hot Q/K and an encoding V instead of random values
  std::string cudnn_tag;           // with kPrefillCudnn: run this engine configuration (attention_prefill_cudnn_with)
};

#ifdef TRIFORCE_HAVE_CUDA
using tf::testing::fill_uniform;

// The query rows to check: all, or the first, the last, those around the
// 64/128-row tile edges near both ends, and a spread through the middle.
std::vector<int64_t> rows_to_check(int64_t n, int64_t max_rows) {
  std::vector<int64_t> r;
  if (n <= max_rows) {
    for (int64_t i = 0; i < n; ++i) r.push_back(i);
    return r;
  }
  for (int64_t i : {0, 1, 2, 63, 64, 65, 127, 128, 129}) r.push_back(i);
  for (int64_t i = 1; i <= 9; ++i) r.push_back(n - i);
  r.push_back(n - 129), r.push_back(n - 128), r.push_back(n - 127);
  const int64_t spread = max_rows - int64_t(r.size());
  for (int64_t i = 0; i < spread; ++i) r.push_back((n * (2 * i + 1)) / (2 * spread));
  r.erase(std::remove_if(r.begin(), r.end(), [n](int64_t i) { return i < 0 || i >= n; }), r.end());
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// The kernels to run a head_dim on: mma.sync always, wgmma and cuDNN where they run.
std::vector<int> kernels_for(int64_t D) {
  std::vector<int> k{tf::cuda::kPrefillMma};
  if (tf::cuda::attention_prefill_wgmma_available(D)) k.push_back(tf::cuda::kPrefillWgmma);
  if (tf::cuda::cudnn_attention_available()) k.push_back(tf::cuda::kPrefillCudnn);
  return k;
}
const char* kernel_name(int config) {
  return config == tf::cuda::kPrefillWgmma    ? "wgmma"
         : config == tf::cuda::kPrefillWgmma3 ? "wgmma3"
         : config == tf::cuda::kPrefillCudnn  ? "cudnn"
         : config == 0                        ? "default"
                                              : "mma";
}

// Structured inputs: the query at slot s of head h is 16 at dim (s + 7 kvh) % D, the key at slot j of
// kv head kvh 16 at dim (j + 7 kvh) % D, so query s attends (e^~22 above the rest) to the visible
// slots j = s mod D of its own kv head. V[kvh][j][d] = j % 16 + 16 ((d + kvh) % 16), exact in f16
// and bf16, so a wrong output names the slot (value % 16) and dim (value / 16) it came from.
void fill_structured(std::vector<float>& q, std::vector<float>& k, std::vector<float>& v, const Case& c, int64_t cap) {
  const int64_t D = c.D, G = c.H / c.KH, off = c.kv - c.n;
  std::fill(q.begin(), q.end(), 0.0f);
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t h = 0; h < c.H; ++h) q[(i * c.H + h) * D + (off + i + 7 * (h / G)) % D] = 16.0f;
  for (int64_t kh = 0; kh < c.KH; ++kh)
    for (int64_t j = 0; j < c.kv; ++j) {
      float* kr = k.data() + (kh * cap + j) * D;
      float* vr = v.data() + (kh * cap + j) * D;
      for (int64_t d = 0; d < D; ++d) kr[d] = 0.0f, vr[d] = float(j % 16 + 16 * ((d + kh) % 16));
      kr[(j + 7 * kh) % D] = 16.0f;
    }
}

// False when the kernel did not run the case (cuDNN refused it).
bool run_case(const Case& c) {
  SCOPED_TRACE(testing::Message() << "n=" << c.n << " kv=" << c.kv << " D=" << c.D << " H=" << c.H
                                  << " KH=" << c.KH << " " << tf::dtype_name(c.dt) << " kernel "
                                  << kernel_name(c.config) << (c.structured ? " structured" : "") << " "
                                  << c.cudnn_tag);
  const int64_t cap = c.kv + 11, D = c.D, G = c.H / c.KH;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> k(c.KH * cap * D, nan), v(c.KH * cap * D, nan), q(c.n * c.H * D);
  if (c.structured) {
    fill_structured(q, k, v, c, cap);
  } else {
    for (int64_t h = 0; h < c.KH; ++h) {
      fill_uniform(k, h * cap * D, (h * cap + c.kv) * D, 300 + h);
      fill_uniform(v, h * cap * D, (h * cap + c.kv) * D, 400 + h);
    }
    fill_uniform(q, 0, q.size(), 17 + c.n);
    for (auto& x : q) x *= 2.0f;  // sharper softmax
  }
  tf::cuda::round_to(k, c.dt), tf::cuda::round_to(v, c.dt), tf::cuda::round_to(q, c.dt);

  auto dk = tf::cuda::upload_as(k, c.dt), dv = tf::cuda::upload_as(v, c.dt), dq = tf::cuda::upload_as(q, c.dt);
  tf::cuda::DeviceBuffer dout(q.size() * 2);
  dout.poison();
  tf::cuda::AttentionPrefillParams p;
  p.q = dq.get(), p.k_cache = dk.get(), p.v_cache = dv.get(), p.out = dout.get();
  p.n = c.n, p.kv_length = c.kv, p.num_heads = c.H, p.num_kv_heads = c.KH, p.head_dim = D, p.capacity = cap;
  p.dtype = c.dt;
  if (c.config == tf::cuda::kPrefillCudnn && !tf::cuda::attention_prefill_cudnn_plan(p)) {
    // Prefill calls have more than 32 queries (fewer go to the decode kernel): those cuDNN must run.
    if (c.n > 32) ADD_FAILURE() << "cuDNN refuses " << tf::cuda::cudnn_attention_stats().last_refusal;
    else std::printf("note: cuDNN refuses %s (not a prefill shape)\n", tf::cuda::cudnn_attention_stats().last_refusal.c_str());
    return false;
  }
  if (!c.cudnn_tag.empty()) {
    if (!tf::cuda::attention_prefill_cudnn_with(p, c.cudnn_tag)) return false;
  } else {
    tf::cuda::attention_prefill_config(p, c.config);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = tf::cuda::download_as(dout, q.size(), c.dt);

  size_t not_finite = 0;
  for (float x : got) not_finite += !std::isfinite(x);
  EXPECT_EQ(not_finite, 0u) << "non-finite outputs (unwritten, or NaN read from past the length)";

  const auto rows = rows_to_check(c.n, c.max_checked_rows);
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<float> ref(rows.size() * c.H * D);
  auto reference = [&](size_t first, size_t step) {
    std::vector<double> w(c.kv), acc(D);
    for (size_t ri = first; ri < rows.size(); ri += step) {
      const int64_t i = rows[ri], last = c.kv - c.n + i;  // query i sees slots 0..last
      for (int64_t h = 0; h < c.H; ++h) {
        const float* qr = q.data() + (i * c.H + h) * D;
        const float* K = k.data() + (h / G) * cap * D;
        const float* V = v.data() + (h / G) * cap * D;
        double mx = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += double(qr[d]) * K[j * D + d];
          w[j] = s * scale;
          mx = std::max(mx, w[j]);
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= last; ++j) {
          const double e = std::exp(w[j] - mx);
          sum += e;
          for (int64_t d = 0; d < D; ++d) acc[d] += e * V[j * D + d];
        }
        for (int64_t d = 0; d < D; ++d) ref[(ri * c.H + h) * D + d] = float(acc[d] / sum);
      }
    }
  };
  const size_t nthreads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 0; t < nthreads; ++t) pool.emplace_back(reference, t, nthreads);
  for (auto& t : pool) t.join();

  const float rtol = c.dt == DType::BF16 ? 1.6e-2f : 2e-3f, atol = c.dt == DType::BF16 ? 8e-3f : 1e-3f;
  size_t bad = 0;
  double max_err = 0;
  for (size_t ri = 0; ri < rows.size(); ++ri)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const float r = ref[(ri * c.H + h) * D + d], g = got[(rows[ri] * c.H + h) * D + d];
        const float e = std::fabs(g - r);
        if (std::isfinite(g)) max_err = std::max<double>(max_err, e);
        if (!(std::isfinite(g) && e <= atol + rtol * std::fabs(r)) && bad++ == 0) {
          ADD_FAILURE() << "first mismatch: query " << rows[ri] << " (row " << rows[ri] % 128 << " of its 128-row block, "
                        << rows[ri] % 64 << " of its 64-row warpgroup), head " << h << ", dim " << d << ": got " << g
                        << " want " << r;
          if (c.structured && std::isfinite(g))
            ADD_FAILURE() << "  structured decode: got ~ slot%16 " << std::fmod(std::round(g), 16.0f) << ", dim%16 "
                          << std::floor(std::round(g) / 16.0f) << "; want slot%16 " << std::fmod(std::round(r), 16.0f)
                          << ", dim%16 " << std::floor(std::round(r) / 16.0f) << " (an average when several slots match)";
        }
      }
  EXPECT_EQ(bad, 0u) << bad << " of " << rows.size() * c.H * D << " checked elements off; max |err| " << max_err;
  return true;
}
#endif

}  // namespace

// Every n x head_dim x MHA/GQA x dtype x kernel, with the queries filling the KV
// (a whole prompt) and as the tail of a longer KV (a chunk after earlier chunks).
TEST(KernelsAttentionPrefill, ShortLengths) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (int64_t D : {64, 128})
    for (int kern : kernels_for(D))
      for (auto hk : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}})
        for (DType dt : {DType::F16, DType::BF16}) {
          // Sanitizer shapes: the same cases with 4097 cut to 300 (still several blocks and tiles).
          const int64_t big = tf::testing::pick<int64_t>(4097, 300);
          for (int64_t n : tf::testing::grid<int64_t>({1, 3, 127, 129, 4097}, {1, 3, 129, 300}))
            run_case({n, n, D, hk.first, hk.second, dt, 160, kern});
          run_case({1, 129, D, hk.first, hk.second, dt, 600, kern});
          run_case({3, 127, D, hk.first, hk.second, dt, 600, kern});
          run_case({129, big, D, hk.first, hk.second, dt, 64, kern});
          run_case({127, 200, D, hk.first, hk.second, dt, 600, kern});
        }
#endif
}

// Small tiles with structured inputs on each kernel, all rows checked: one
// 128-row block over one 128-slot tile (a pure one-hot attention, so a
// fragment or descriptor bug shows as a wrong slot/dim in the decode), then
// two blocks and three tiles, a query tail at an unaligned offset, and GQA.
TEST(KernelsAttentionPrefill, StructuredSmallTiles) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (int kern : kernels_for(128))
    for (DType dt : {DType::F16, DType::BF16}) {
      run_case({128, 128, 128, 1, 1, dt, 600, kern, true});
      run_case({64, 64, 128, 1, 1, dt, 600, kern, true});
      run_case({256, 256, 128, 2, 2, dt, 600, kern, true});
      run_case({100, 300, 128, 2, 1, dt, 600, kern, true});
      run_case({129, 385, 128, 8, 2, dt, 600, kern, true});
    }
#endif
}

// The default entry point (wgmma where available, unless TRIFORCE_PREFILL_KERNEL=mma) agrees too.
TEST(KernelsAttentionPrefill, DefaultKernel) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  const int64_t big = tf::testing::pick<int64_t>(4097, 300);
  run_case({big, big, 128, 8, 2, DType::BF16, 160, 0});
  run_case({129, big, 64, 8, 2, DType::F16, 64, 0});
#endif
}

// The wgmma kernel refuses what it does not cover instead of running wrongly.
TEST(KernelsAttentionPrefill, WgmmaConfigNeedsHeadDim128) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  tf::cuda::DeviceBuffer buf(size_t(64) * 64 * 2);
  tf::cuda::AttentionPrefillParams p;
  p.q = p.k_cache = p.v_cache = buf.get(), p.out = buf.get();
  p.n = p.kv_length = p.capacity = 4, p.num_heads = p.num_kv_heads = 1, p.head_dim = 64;
  EXPECT_THROW(tf::cuda::attention_prefill_config(p, tf::cuda::kPrefillWgmma), tf::Error);
#endif
}

TEST(KernelsAttentionPrefill, LongContext) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  for (int kern : kernels_for(128)) {
    run_case({16385, 16385, 128, 32, 8, DType::F16, 40, kern});
    run_case({65537, 65537, 128, 32, 8, DType::BF16, 40, kern});
    run_case({4097, 65537, 128, 8, 8, DType::F16, 40, kern});
  }
  run_case({129, 65537, 64, 16, 4, DType::F16, 40, tf::cuda::kPrefillMma});
  run_case({65537, 65537, 64, 8, 8, DType::F16, 40, tf::cuda::kPrefillMma});
#endif
}

// cuDNN's fused attention on the shapes the chunked prefill gives it: GQA ratios 1, 4 and 8, a
// chunk after a prefix (kv_length > n, lengths off every 64/128 multiple), one query, a whole
// prompt, both head dims and dtypes. Skipped where cuDNN is not built in or cannot run.
TEST(KernelsAttentionPrefill, CudnnShapes) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  if (!tf::cuda::cudnn_attention_available())
    GTEST_SKIP() << "cuDNN attention unavailable: " << tf::cuda::cudnn_attention_version();
  for (int64_t D : {64, 128})
    for (auto hk : {std::pair<int64_t, int64_t>{8, 8}, {16, 4}, {32, 4}})  // ratios 1, 4, 8
      for (DType dt : {DType::F16, DType::BF16}) {
        using tf::testing::pick;  // sanitizer shapes: the same kinds of case, a tenth of the size
        run_case({pick<int64_t>(2048, 200), pick<int64_t>(6144, 614), D, hk.first, hk.second, dt, 160,
                  tf::cuda::kPrefillCudnn});
        run_case({pick<int64_t>(1000, 100), pick<int64_t>(1777, 177), D, hk.first, hk.second, dt, 160,
                  tf::cuda::kPrefillCudnn});
        run_case({1, pick<int64_t>(5000, 500), D, hk.first, hk.second, dt, 600, tf::cuda::kPrefillCudnn});
        run_case({33, 33, D, hk.first, hk.second, dt, 600, tf::cuda::kPrefillCudnn});
        run_case({300, 300, D, hk.first, hk.second, dt, 600, tf::cuda::kPrefillCudnn});
      }
  // The shapes of a 7B / 8B prefill must be cuDNN's, not a silent fallback.
  tf::cuda::AttentionPrefillParams p;
  tf::cuda::DeviceBuffer buf(16);
  p.q = p.k_cache = p.v_cache = buf.get(), p.out = buf.get();
  for (int64_t kh : {32, 8}) {
    p.n = 2048, p.kv_length = 8192, p.capacity = 131072 + 64, p.num_heads = 32, p.num_kv_heads = kh, p.head_dim = 128;
    p.dtype = DType::BF16;
    EXPECT_TRUE(tf::cuda::attention_prefill_cudnn_plan(p))
        << "cuDNN refuses the 7B/8B chunk shape: " << tf::cuda::cudnn_attention_stats().last_refusal;
  }
  EXPECT_GT(tf::cuda::cudnn_attention_stats().runs, 0);
#endif
}

// Every engine configuration a benchmark may pin (attention_prefill_cudnn_candidates) and cuDNN builds
// computes the attention within the same tolerance of the CPU reference, as a chunk after earlier keys
// with GQA: a configuration chosen for speed (TRIFORCE_CUDNN_ATTN_CONFIG) must not change the result.
TEST(KernelsAttentionPrefill, CudnnEngineConfigs) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  if (!tf::cuda::cudnn_attention_available())
    GTEST_SKIP() << "cuDNN attention unavailable: " << tf::cuda::cudnn_attention_version();
  tf::cuda::AttentionPrefillParams p;
  tf::cuda::DeviceBuffer buf(16);
  p.q = p.k_cache = p.v_cache = buf.get(), p.out = buf.get();
  p.n = 300, p.kv_length = 700, p.capacity = 700 + 11, p.num_heads = 8, p.num_kv_heads = 4, p.head_dim = 128;
  p.dtype = DType::BF16;
  const std::string chosen = tf::cuda::attention_prefill_cudnn_config(p);
  EXPECT_TRUE(tf::parse_cudnn_config_tag(chosen)) << "the default's configuration tag: '" << chosen << "'";
  const auto tags = tf::cuda::attention_prefill_cudnn_candidates(p);
  ASSERT_FALSE(tags.empty()) << "no engine configuration listed";
  int built = 0;
  std::string ran;
  for (const auto& tag : tags) {
    Case c{300, 700, 128, 8, 4, DType::BF16, 600, tf::cuda::kPrefillCudnn};
    c.cudnn_tag = tag;
    if (run_case(c)) ++built, ran += " " + tag;
  }
  std::printf("cuDNN engine configurations: %d of %zu build; default %s; ran%s\n", built, tags.size(), chosen.c_str(),
              ran.c_str());
  EXPECT_GE(built, 1);
  EXPECT_FALSE(tf::cuda::attention_prefill_cudnn_with(p, "eng999999")) << "an engine that does not exist ran";
#endif
}

// Config 0 follows the backend switch: auto and cudnn give cuDNN's bits where it runs, ours gives
// our default kernel's; the switch's values parse, and a bad one names the variable.
TEST(KernelsAttentionPrefill, BackendSwitch) {
  REQUIRE_DEVICE();
#ifdef TRIFORCE_HAVE_CUDA
  using tf::cuda::PrefillBackend;
  EXPECT_EQ(tf::cuda::parse_prefill_backend(nullptr), PrefillBackend::Auto);
  EXPECT_EQ(tf::cuda::parse_prefill_backend("auto"), PrefillBackend::Auto);
  EXPECT_EQ(tf::cuda::parse_prefill_backend("cudnn"), PrefillBackend::Cudnn);
  EXPECT_EQ(tf::cuda::parse_prefill_backend("ours"), PrefillBackend::Ours);
  try {
    tf::cuda::parse_prefill_backend("fa3");
    ADD_FAILURE() << "a bad value parsed";
  } catch (const tf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("TRIFORCE_PREFILL_ATTENTION=fa3"), std::string::npos) << e.what();
  }

  const int64_t n = 700, kv = 1500, H = 16, KH = 4, D = 128, cap = kv + 5;
  const DType dt = DType::BF16;
  std::vector<float> q(n * H * D), k(KH * cap * D), v(KH * cap * D);
  fill_uniform(q, 0, q.size(), 5), fill_uniform(k, 0, k.size(), 6), fill_uniform(v, 0, v.size(), 7);
  auto dq = tf::cuda::upload_as(q, dt), dk = tf::cuda::upload_as(k, dt), dv = tf::cuda::upload_as(v, dt);
  tf::cuda::DeviceBuffer dout(q.size() * 2);
  tf::cuda::AttentionPrefillParams p;
  p.q = dq.get(), p.k_cache = dk.get(), p.v_cache = dv.get(), p.out = dout.get();
  p.n = n, p.kv_length = kv, p.num_heads = H, p.num_kv_heads = KH, p.head_dim = D, p.capacity = cap, p.dtype = dt;
  auto run = [&](int config) {
    dout.poison();
    tf::cuda::attention_prefill_config(p, config);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> bits(q.size());
    dout.download(bits.data(), bits.size() * 2);
    return bits;
  };
  const auto ours = run(tf::cuda::kPrefillOurs);
  const bool have_cudnn = tf::cuda::cudnn_attention_available();
  tf::cuda::set_prefill_attention_backend(PrefillBackend::Ours);
  EXPECT_EQ(run(0), ours) << "backend ours";
  tf::cuda::set_prefill_attention_backend(PrefillBackend::Auto);
  const auto cudnn = have_cudnn ? run(tf::cuda::kPrefillCudnn) : ours;
  EXPECT_EQ(run(0), cudnn) << "backend auto";
  tf::cuda::set_prefill_attention_backend(PrefillBackend::Cudnn);
  if (have_cudnn) EXPECT_EQ(run(0), cudnn) << "backend cudnn";
  else EXPECT_THROW(run(0), tf::Error) << "backend cudnn without cuDNN must refuse";
  tf::cuda::set_prefill_attention_backend(PrefillBackend::Auto);
#endif
}
