// CPU bodies of the ops in ops/ops.h plus the device dispatch. Plain loops;
// calls of at most cpu::kSkinnyMaxRows rows (decode, verification) go to the
// batch-invariant kernels of cpu/skinny_cpu.h, longer ones (prefill) to BLAS
// (cblas_sgemm for the linears and for attention score/value blocks).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/half.h"
#include "ops/cpu/cpu_threads.h"
#include "ops/cpu/skinny_cpu.h"
#include "ops/ops.h"
#include "ops/cuda/ops_cuda.h"

namespace tf::ops {

namespace {

[[noreturn]] void no_cuda(const char* op) {
#ifdef TRIFORCE_HAVE_CUDA
  TF_FAIL(op << ": tensor is on CUDA but this op has no CUDA body yet");
#else
  TF_FAIL(op << ": tensor is on CUDA but triforce was not built with CUDA");
#endif
}

// All tensors of an op must share one device; returns it.
Device device_of(const char* op, std::initializer_list<const Tensor*> ts) {
  Device d = (*ts.begin())->device;
  for (auto* t : ts)
    TF_CHECK(t->device == d, op << ": tensors on different devices");
  return d;
}

void expect(const char* op, const char* what, const Tensor& t, DType dt, int rank) {
  TF_CHECK(t.data != nullptr || t.numel() == 0, op << ": " << what << " has no data");
  TF_CHECK(t.dtype == dt, op << ": " << what << " is " << dtype_name(t.dtype) << ", expected "
                             << dtype_name(dt));
  TF_CHECK(int(t.shape.size()) == rank, op << ": " << what << " has shape " << shape_str(t.shape)
                                           << ", expected rank " << rank);
}

// [n, ...] viewed as n rows of row_len.
int64_t row_len(const Tensor& t) { return t.shape.empty() ? 1 : t.numel() / t.shape[0]; }

// ---------------- CPU bodies ----------------

void rmsnorm_row(const float* x, const float* w, float* y, int64_t d, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < d; ++i) ss += double(x[i]) * double(x[i]);
  float var = float(ss / double(d));
  float r = 1.0f / std::sqrt(var + eps);
  for (int64_t i = 0; i < d; ++i) y[i] = w[i] * (x[i] * r);
}

void attention_cpu(const Tensor& q, const Tensor& qpos, const KVView& kv, Tensor& out,
                   const AttentionParams& p) {
  const int64_t n = q.shape[0], H = p.num_heads, KH = p.num_kv_heads, D = p.head_dim;
  const int64_t G = H / KH;
  const float scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(float(D));
  const int64_t B = std::max<int64_t>(1, p.row_block);
  const float* Q = q.ptr<float>();
  float* O = out.ptr<float>();
  const int32_t* QP = qpos.ptr<int32_t>();
  const int64_t L = kv.length;
  thread_local std::vector<float> scores;
  for (int64_t r0 = 0; r0 < n; r0 += B) {
    const int64_t nb = std::min(B, n - r0);
    int32_t pmax = std::numeric_limits<int32_t>::min();
    for (int64_t r = 0; r < nb; ++r) pmax = std::max(pmax, QP[r0 + r]);
    // Slots the block can see at most: with identity positions, [0, pmax]; else all.
    int64_t Lb = L;
    if (!kv.positions) Lb = std::min<int64_t>(L, int64_t(pmax) + 1);
    if (Lb <= 0) {
      for (int64_t r = 0; r < nb; ++r)
        std::fill(O + (r0 + r) * H * D, O + (r0 + r + 1) * H * D, 0.0f);
      continue;
    }
    // A "score block" is M query rows sharing one kv head: for a single token
    // the G heads of a group (contiguous, stride D), else one head over nb
    // tokens (stride H*D). Row i belongs to token r0 + i*tok_step.
    const int64_t Mmax = nb == 1 ? G : nb;
    if (scores.size() < size_t(Mmax * Lb)) scores.resize(size_t(Mmax * Lb));
    float* S = scores.data();
    auto block = [&](const float* Qb, float* Ob, int64_t M, int64_t ld, int64_t tok_step, int64_t g) {
      const float* Kh = kv.k + g * kv.head_stride;
      const float* Vh = kv.v + g * kv.head_stride;
      // S[M, Lb] = scale * Q[M, D] . K[Lb, D]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(Lb), int(D), scale, Qb, int(ld), Kh,
                  int(kv.token_stride), 0.0f, S, int(Lb));
      // The softmax rows: vectorised and spread over the pool (a single-threaded
      // scalar exp here was a fifth of a 3.7K-token prefill while the BLAS threads
      // spun); TRIFORCE_CPU_KERNELS=blas keeps the scalar loop for A/B runs.
      const bool fast = cpu::skinny_enabled();
      auto softmax_rows = [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          float* s = S + r * Lb;
          const int32_t pq = QP[r0 + r * tok_step];
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < Lb; ++j) {
            const int64_t pk = kv.positions ? kv.positions[j] : j;
            if (pk > pq) s[j] = -std::numeric_limits<float>::infinity();
            else m = std::max(m, s[j]);
          }
          if (m == -std::numeric_limits<float>::infinity()) {  // sees nothing
            std::fill(s, s + Lb, 0.0f);
            continue;
          }
          float sum = 0.0f;
          if (fast) {
            sum = cpu::exp_sum_row(s, Lb, m);
          } else {
            for (int64_t j = 0; j < Lb; ++j) {
              float e = s[j] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(s[j] - m);
              s[j] = e;
              sum += e;
            }
          }
          const float inv = 1.0f / sum;
          for (int64_t j = 0; j < Lb; ++j) s[j] *= inv;
        }
      };
      if (fast && M * Lb >= (int64_t(1) << 16)) cpu::parallel_for(M, softmax_rows);
      else softmax_rows(0, M);
      // O[M, D] = P[M, Lb] . V[Lb, D]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(D), int(Lb), 1.0f, S, int(Lb), Vh,
                  int(kv.token_stride), 0.0f, Ob, int(ld));
    };
    if (nb == 1) {
      for (int64_t g = 0; g < KH; ++g)
        block(Q + (r0 * H + g * G) * D, O + (r0 * H + g * G) * D, G, D, 0, g);
    } else {
      for (int64_t h = 0; h < H; ++h)
        block(Q + (r0 * H + h) * D, O + (r0 * H + h) * D, nb, H * D, 1, h / G);
    }
  }
}

}  // namespace

Tensor slice_rows(const Tensor& t, int64_t begin, int64_t end) {
  TF_CHECK(!t.shape.empty() && begin >= 0 && begin <= end && end <= t.shape[0],
           "slice_rows: rows [" << begin << ", " << end << ") out of range for shape "
                                << shape_str(t.shape));
  Tensor v = t;
  v.shape[0] = end - begin;
  v.data = static_cast<uint8_t*>(t.data) + size_t(begin) * size_t(row_len(t)) * dtype_size(t.dtype);
  return v;
}

void embedding(const Tensor& table, const Tensor& tokens, Tensor& out) {
  if (table.device == Device::CUDA) return cuda_body::embedding(table, tokens, out);
  expect("embedding", "table", table, DType::F32, 2);
  expect("embedding", "tokens", tokens, DType::I32, 1);
  expect("embedding", "out", out, DType::F32, 2);
  const int64_t n = tokens.shape[0], V = table.shape[0], d = table.shape[1];
  TF_CHECK(out.shape[0] == n && out.shape[1] == d,
           "embedding: out has shape " << shape_str(out.shape) << ", expected [" << n << ", " << d << "]");
  if (device_of("embedding", {&table, &tokens, &out}) == Device::CUDA) no_cuda("embedding");
  const int32_t* tk = tokens.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    TF_CHECK(tk[i] >= 0 && tk[i] < V, "embedding: token id " << tk[i] << " outside vocabulary of " << V);
    std::copy_n(table.ptr<float>() + int64_t(tk[i]) * d, d, out.ptr<float>() + i * d);
  }
}

void rmsnorm(const Tensor& x, const Tensor& weight, Tensor& out, const RmsNormParams& p) {
  if (x.device == Device::CUDA) return cuda_body::rmsnorm(x, weight, out, p);
  expect("rmsnorm", "x", x, DType::F32, 2);
  expect("rmsnorm", "weight", weight, DType::F32, 1);
  expect("rmsnorm", "out", out, DType::F32, 2);
  const int64_t n = x.shape[0], d = x.shape[1];
  TF_CHECK(weight.shape[0] == d && out.shape == x.shape,
           "rmsnorm: shapes x " << shape_str(x.shape) << " weight " << shape_str(weight.shape) << " out "
                                << shape_str(out.shape) << " do not match");
  if (device_of("rmsnorm", {&x, &weight, &out}) == Device::CUDA) no_cuda("rmsnorm");
  for (int64_t i = 0; i < n; ++i)
    rmsnorm_row(x.ptr<float>() + i * d, weight.ptr<float>(), out.ptr<float>() + i * d, d, p.eps);
}

void add_inplace(Tensor& residual, const Tensor& x) {
  if (residual.device == Device::CUDA) return cuda_body::add_inplace(residual, x);
  expect("add_inplace", "residual", residual, DType::F32, int(residual.shape.size()));
  expect("add_inplace", "x", x, DType::F32, int(residual.shape.size()));
  TF_CHECK(residual.shape == x.shape, "add_inplace: shapes " << shape_str(residual.shape) << " and "
                                                             << shape_str(x.shape) << " differ");
  if (device_of("add_inplace", {&residual, &x}) == Device::CUDA) no_cuda("add_inplace");
  float* r = residual.ptr<float>();
  const float* a = x.ptr<float>();
  for (int64_t i = 0, e = x.numel(); i < e; ++i) r[i] += a[i];
}

namespace {
// TRIFORCE_ATTN_SPLIT_SLOTS, read once: 0 unset, -1 auto, else the slots.
int64_t split_slots_env() {
  static const int64_t slots = [] {
    const char* e = std::getenv("TRIFORCE_ATTN_SPLIT_SLOTS");
    if (!e || !*e) return int64_t(0);
    if (std::string(e) == "auto") return int64_t(-1);
    char* end = nullptr;
    const long long v = std::strtoll(e, &end, 10);
    TF_CHECK(end && *end == '\0' && v >= 64 && v % 64 == 0,
             "TRIFORCE_ATTN_SPLIT_SLOTS: expected 'auto' or a multiple of 64 (>= 64), got '" << e << "'");
    return int64_t(v);
  }();
  return slots;
}
}  // namespace

int64_t attention_split_slots() {
  const int64_t e = split_slots_env();
  return e > 0 ? e : int64_t(512);
}

int64_t attention_split_slots_auto(int64_t num_kv_heads) {
  const int64_t want = 16 * std::max<int64_t>(1, num_kv_heads);
  int64_t s = 64;
  while (s * 2 <= want && s < 512) s *= 2;
  return s;
}

int64_t attention_split_slots_for(int64_t num_kv_heads) {
  const int64_t e = split_slots_env();
  if (e > 0) return e;
  return e < 0 ? attention_split_slots_auto(num_kv_heads) : attention_split_slots();
}

void cast(const Tensor& src, Tensor& dst) {
  if (dst.device == Device::CUDA) return cuda_body::cast(src, dst);
  expect("cast", "src", src, DType::F32, int(src.shape.size()));
  expect("cast", "dst", dst, DType::F32, int(src.shape.size()));
  TF_CHECK(src.shape == dst.shape, "cast: shapes " << shape_str(src.shape) << " and " << shape_str(dst.shape) << " differ");
  if (device_of("cast", {&src, &dst}) == Device::CUDA) no_cuda("cast");
  if (src.data != dst.data) std::copy_n(src.ptr<float>(), src.numel(), dst.ptr<float>());
}

void add_rmsnorm(Tensor& residual, const Tensor& x, const Tensor& weight, Tensor& out,
                 const RmsNormParams& p) {
  if (residual.device == Device::CUDA) return cuda_body::add_rmsnorm(residual, x, weight, out, p);
  expect("add_rmsnorm", "residual", residual, DType::F32, 2);
  expect("add_rmsnorm", "x", x, DType::F32, 2);
  expect("add_rmsnorm", "weight", weight, DType::F32, 1);
  expect("add_rmsnorm", "out", out, DType::F32, 2);
  const int64_t n = x.shape[0], d = x.shape[1];
  TF_CHECK(residual.shape == x.shape && out.shape == x.shape && weight.shape[0] == d,
           "add_rmsnorm: shapes residual " << shape_str(residual.shape) << " x " << shape_str(x.shape)
                                           << " weight " << shape_str(weight.shape) << " out "
                                           << shape_str(out.shape) << " do not match");
  if (device_of("add_rmsnorm", {&residual, &x, &weight, &out}) == Device::CUDA) no_cuda("add_rmsnorm");
  for (int64_t i = 0; i < n; ++i) {
    float* r = residual.ptr<float>() + i * d;
    const float* a = x.ptr<float>() + i * d;
    for (int64_t j = 0; j < d; ++j) r[j] += a[j];
    rmsnorm_row(r, weight.ptr<float>(), out.ptr<float>() + i * d, d, p.eps);
  }
}

void linear(const Tensor& x, const Tensor& weight, Tensor& y) {
  if (x.device == Device::CUDA) return cuda_body::linear(x, weight, y);
  expect("linear", "x", x, DType::F32, 2);
  expect("linear", "weight", weight, weight.dtype == DType::F16 ? DType::F16 : DType::F32, 2);  // f16: below
  expect("linear", "y", y, DType::F32, 2);
  const int64_t n = x.shape[0], in = x.shape[1], outd = weight.shape[0];
  TF_CHECK(weight.shape[1] == in && y.shape[0] == n && y.shape[1] == outd,
           "linear: x " << shape_str(x.shape) << " . W " << shape_str(weight.shape) << "^T into y "
                        << shape_str(y.shape) << " do not match");
  if (device_of("linear", {&x, &weight, &y}) == Device::CUDA) no_cuda("linear");
  if (n == 0 || outd == 0) return;
  // Decode and verification rows: one read of the weights for all rows, and a
  // row's bits independent of n (cpu/skinny_cpu.h). sgemm on a skinny input
  // cost several sgemv, and differed from sgemv in the last bits.
  if (weight.dtype == DType::F16) {
    // f16 weights on the CPU (a draft's, model/cpu_f16_linears.h): the skinny rows read them as they are; a
    // longer call (a prompt chunk) widens them once into scratch for BLAS. Either way the f32 call's bits.
    if (n <= cpu::kSkinnyMaxRows && cpu::skinny_enabled())
      return cpu::linear_skinny(x.ptr<float>(), n, in, weight.ptr<uint16_t>(), outd, y.ptr<float>());
    thread_local std::vector<float> wide;
    wide.resize(size_t(outd * in));
    const uint16_t* h = weight.ptr<uint16_t>();
    for (size_t i = 0; i < wide.size(); ++i) wide[i] = f16_to_f32(h[i]);
    Tensor w32;  // a borrowed view of the scratch
    w32.data = wide.data();
    w32.shape = weight.shape;
    return linear(x, w32, y);
  }
  if (n <= cpu::kSkinnyMaxRows && cpu::skinny_enabled())
    return cpu::linear_skinny(x.ptr<float>(), n, in, weight.ptr<float>(), outd, y.ptr<float>());
  if (n == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(outd), int(in), 1.0f, weight.ptr<float>(), int(in),
                x.ptr<float>(), 1, 0.0f, y.ptr<float>(), 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(outd), int(in), 1.0f, x.ptr<float>(),
              int(in), weight.ptr<float>(), int(in), 0.0f, y.ptr<float>(), int(outd));
}

void rope_cos_sin(const Tensor& inv_freq, const Tensor& positions, Tensor& cos, Tensor& sin,
                  const RopeParams& p) {
  expect("rope_cos_sin", "inv_freq", inv_freq, DType::F32, 1);
  expect("rope_cos_sin", "positions", positions, DType::I32, 1);
  expect("rope_cos_sin", "cos", cos, DType::F32, 2);
  expect("rope_cos_sin", "sin", sin, DType::F32, 2);
  const int64_t n = positions.shape[0], half = inv_freq.shape[0];
  TF_CHECK(cos.shape[0] == n && cos.shape[1] == half && sin.shape == cos.shape,
           "rope_cos_sin: cos/sin have shape " << shape_str(cos.shape) << ", expected [" << n << ", "
                                               << half << "]");
  if (device_of("rope_cos_sin", {&inv_freq, &positions, &cos, &sin}) == Device::CUDA) no_cuda("rope_cos_sin");
  for (int64_t i = 0; i < n; ++i) {
    const float pos = float(positions.ptr<int32_t>()[i]);
    for (int64_t j = 0; j < half; ++j) {
      const float ang = inv_freq.ptr<float>()[j] * pos;  // fp32 product, as torch's matmul with K=1
      cos.ptr<float>()[i * half + j] = float(std::cos(double(ang))) * p.attention_scaling;
      sin.ptr<float>()[i * half + j] = float(std::sin(double(ang))) * p.attention_scaling;
    }
  }
}

void rope_apply(Tensor& x, const Tensor& cos, const Tensor& sin) {
  expect("rope_apply", "x", x, DType::F32, 3);
  expect("rope_apply", "cos", cos, DType::F32, 2);
  expect("rope_apply", "sin", sin, DType::F32, 2);
  const int64_t n = x.shape[0], H = x.shape[1], D = x.shape[2], half = cos.shape[1];
  TF_CHECK(cos.shape[0] == n && sin.shape == cos.shape && D == 2 * half,
           "rope_apply: x " << shape_str(x.shape) << " and cos/sin " << shape_str(cos.shape)
                            << " do not match (need head_dim == 2 * half)");
  if (device_of("rope_apply", {&x, &cos, &sin}) == Device::CUDA) no_cuda("rope_apply");
  for (int64_t i = 0; i < n; ++i) {
    const float* c = cos.ptr<float>() + i * half;
    const float* s = sin.ptr<float>() + i * half;
    for (int64_t h = 0; h < H; ++h) {
      float* v = x.ptr<float>() + (i * H + h) * D;
      for (int64_t j = 0; j < half; ++j) {
        const float x1 = v[j], x2 = v[j + half];
        v[j] = x1 * c[j] - x2 * s[j];
        v[j + half] = x2 * c[j] + x1 * s[j];
      }
    }
  }
}

void rope_apply_rows(Tensor& q, Tensor& k, const Tensor& cos, const Tensor& sin, const Tensor& rows) {
  if (q.device == Device::CUDA) return cuda_body::rope_apply_at(q, &k, cos, sin, rows);
  expect("rope_apply_rows", "q", q, DType::F32, 3);
  expect("rope_apply_rows", "k", k, DType::F32, 3);
  expect("rope_apply_rows", "cos", cos, DType::F32, 2);
  expect("rope_apply_rows", "sin", sin, DType::F32, 2);
  expect("rope_apply_rows", "rows", rows, DType::I32, 1);
  const int64_t n = q.shape[0], half = cos.shape[1];
  TF_CHECK(k.shape[0] == n && rows.shape[0] == n && q.shape[2] == 2 * half && k.shape[2] == 2 * half &&
               sin.shape == cos.shape,
           "rope_apply_rows: q " << shape_str(q.shape) << " k " << shape_str(k.shape) << " tables "
                                 << shape_str(cos.shape) << " do not match");
  for (Tensor* x : {&q, &k}) {
    const int64_t H = x->shape[1];
    for (int64_t i = 0; i < n; ++i) {
      const int32_t r = rows.ptr<int32_t>()[i];
      TF_CHECK(r >= 0 && r < cos.shape[0], "rope_apply_rows: row " << r << " outside table of " << cos.shape[0]);
      const float* c = cos.ptr<float>() + int64_t(r) * half;
      const float* sn = sin.ptr<float>() + int64_t(r) * half;
      for (int64_t h = 0; h < H; ++h) {
        float* v = x->ptr<float>() + (i * H + h) * 2 * half;
        for (int64_t j = 0; j < half; ++j) {
          const float x1 = v[j], x2 = v[j + half];
          v[j] = x1 * c[j] - x2 * sn[j];
          v[j + half] = x2 * c[j] + x1 * sn[j];
        }
      }
    }
  }
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  if (gate.device == Device::CUDA) return cuda_body::silu_mul(gate, up, out);
  expect("silu_mul", "gate", gate, DType::F32, 2);
  expect("silu_mul", "up", up, DType::F32, 2);
  expect("silu_mul", "out", out, DType::F32, 2);
  TF_CHECK(gate.shape == up.shape && out.shape == gate.shape,
           "silu_mul: shapes gate " << shape_str(gate.shape) << " up " << shape_str(up.shape) << " out "
                                    << shape_str(out.shape) << " differ");
  if (device_of("silu_mul", {&gate, &up, &out}) == Device::CUDA) no_cuda("silu_mul");
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
  for (int64_t i = 0, e = gate.numel(); i < e; ++i) {
    const float a = g[i];
    o[i] = (a / (1.0f + std::exp(-a))) * u[i];
  }
}

void attention(const Tensor& q, const Tensor& q_positions, const KVView& kv, Tensor& out,
               const AttentionParams& p) {
  if (q.device == Device::CUDA) return cuda_body::attention(q, q_positions, kv, out, p);
  expect("attention", "q", q, DType::F32, 3);
  expect("attention", "q_positions", q_positions, DType::I32, 1);
  expect("attention", "out", out, DType::F32, 3);
  TF_CHECK(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
           "attention: " << p.num_heads << " heads is not a multiple of " << p.num_kv_heads << " kv heads");
  TF_CHECK(q.shape[1] == p.num_heads && q.shape[2] == p.head_dim && out.shape == q.shape &&
               q_positions.shape[0] == q.shape[0],
           "attention: q " << shape_str(q.shape) << " out " << shape_str(out.shape) << " positions "
                           << shape_str(q_positions.shape) << " do not match heads=" << p.num_heads
                           << " head_dim=" << p.head_dim);
  TF_CHECK(kv.num_kv_heads == p.num_kv_heads && kv.head_dim == p.head_dim,
           "attention: KV view has " << kv.num_kv_heads << " heads of " << kv.head_dim << ", expected "
                                     << p.num_kv_heads << " of " << p.head_dim);
  TF_CHECK(kv.length == 0 || (kv.k && kv.v), "attention: KV view has no data");
  Device d = device_of("attention", {&q, &q_positions, &out});
  TF_CHECK(kv.device == d, "attention: KV view and queries on different devices");
  if (d == Device::CUDA) no_cuda("attention");
  if (q.shape[0] <= cpu::kSkinnyMaxRows && cpu::skinny_enabled())
    return cpu::attention_skinny(q.ptr<float>(), q_positions.ptr<int32_t>(), q.shape[0], kv, out.ptr<float>(), p);
  attention_cpu(q, q_positions, kv, out, p);
}

void softmax_top_p(const Tensor& logits, Tensor& probs, const SoftmaxParams& p) {
  expect("softmax_top_p", "logits", logits, DType::F32, 2);
  expect("softmax_top_p", "probs", probs, DType::F32, 2);
  TF_CHECK(probs.shape == logits.shape, "softmax_top_p: probs " << shape_str(probs.shape) << " vs logits "
                                                                << shape_str(logits.shape));
  TF_CHECK(p.temperature > 0.0f, "softmax_top_p: temperature must be > 0, got " << p.temperature);
  TF_CHECK(p.top_p > 0.0f, "softmax_top_p: top_p must be > 0, got " << p.top_p);
  if (device_of("softmax_top_p", {&logits, &probs}) == Device::CUDA) return cuda_body::softmax_top_p(logits, probs, p);
  const int64_t n = logits.shape[0], V = logits.shape[1];
  std::vector<float> s(V);
  std::vector<int32_t> idx(V);
  std::vector<char> keep(V);
  for (int64_t i = 0; i < n; ++i) {
    const float* l = logits.ptr<float>() + i * V;
    float* pr = probs.ptr<float>() + i * V;
    for (int64_t j = 0; j < V; ++j) s[j] = l[j] / p.temperature;
    std::fill(keep.begin(), keep.end(), 1);
    if (p.top_p < 1.0f) {
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return s[a] < s[b]; });
      const float m = s[idx[V - 1]];
      // Sums in double: an fp32 running sum over a flat 128K-token row drifts
      // by 1e-3 (measured), moving the cut; in double only cumulative masses
      // within ~1e-7 of 1 - top_p are decided by rounding, so the CUDA kernel
      // (exact fixed-point sums) can be held to the same kept set.
      double tot = 0.0;
      for (int64_t j = 0; j < V; ++j) tot += std::exp(s[idx[j]] - m);
      const float thresh = float(1.0 - double(p.top_p));
      double cum = 0.0;
      for (int64_t j = 0; j < V - std::min<int64_t>(V, std::max<int64_t>(1, p.min_tokens_to_keep)); ++j) {
        cum += double(std::exp(s[idx[j]] - m)) / tot;
        if (cum <= thresh) keep[idx[j]] = 0;
        else break;  // cumulative sum is non-decreasing
      }
    }
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j)
      if (keep[j]) m = std::max(m, s[j]);
    // The normaliser is summed in double: a float running sum over a 128K-token
    // vocabulary drops the small terms and reads high (seen against the GPU softmax).
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      pr[j] = keep[j] ? std::exp(s[j] - m) : 0.0f;
      sum += pr[j];
    }
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j < V; ++j) pr[j] *= inv;
  }
}

ArgmaxIds argmax_ids(const std::vector<int32_t>& ids, int64_t full_vocab, Device dev) {
  TF_CHECK(!ids.empty() && int64_t(ids.size()) <= full_vocab, "argmax_ids: " << ids.size() << " ids of a "
                                                                             << full_vocab << "-token vocabulary");
  ArgmaxIds a;
  a.full_vocab = full_vocab;
  int64_t next = 0;  // ids ascend: the first gap
  for (size_t j = 0; j < ids.size(); ++j) {
    TF_CHECK(ids[j] >= 0 && ids[j] < full_vocab && (j == 0 || ids[j] > ids[j - 1]),
             "argmax_ids: id " << ids[j] << " at " << j << " is out of range or not increasing");
    if (ids[j] == next) ++next;
  }
  a.first_missing = next;
  Tensor h = Tensor::cpu(DType::I32, {int64_t(ids.size())});
  std::copy(ids.begin(), ids.end(), h.ptr<int32_t>());
  if (dev == Device::CPU) {
    a.ids = h;
  } else {
    a.ids = empty_tensor(dev, DType::I32, h.shape);
    copy_tensor(a.ids, h);
  }
  return a;
}

// The device forms of the host's sampling rules (gen/sampling.h,
// speculative/verify.h): a host caller uses those directly.
void draw_rows(const Tensor& probs, Tensor& out, uint64_t seed, uint64_t counter) {
  TF_CHECK(probs.device == Device::CUDA, "draw_rows: CUDA rows only (the host draws with tf::draw_from)");
  cuda_body::draw_rows(probs, out, seed, counter);
}

void verify_rows(const Tensor& q, const Tensor& p, const std::vector<int32_t>& x, uint64_t seed, uint64_t counter,
                 bool residual, Tensor& out) {
  TF_CHECK(p.device == Device::CUDA, "verify_rows: CUDA rows only (the host verifies with speculative::verify)");
  cuda_body::verify_rows(q, p, x, seed, counter, residual, out);
}

void expand_columns(const Tensor& in, const Tensor& ids, float fill, Tensor& out) {
  TF_CHECK(in.device == Device::CUDA, "expand_columns: CUDA rows only (the host uses expand_restricted_logits)");
  cuda_body::expand_columns(in, ids, fill, out);
}

void argmax(const Tensor& x, Tensor& out, const ArgmaxIds* ids) {
  if (x.device == Device::CUDA) return cuda_body::argmax(x, out, ids);
  expect("argmax", "x", x, DType::F32, 2);
  expect("argmax", "out", out, DType::I32, 1);
  TF_CHECK(out.shape[0] == x.shape[0], "argmax: out " << shape_str(out.shape) << " for x " << shape_str(x.shape));
  if (device_of("argmax", {&x, &out}) == Device::CUDA) no_cuda("argmax");
  const int64_t n = x.shape[0], V = x.shape[1];
  if (ids) {
    TF_CHECK(ids->ids.device == Device::CPU && ids->ids.dtype == DType::I32 && ids->ids.numel() == V &&
                 ids->full_vocab >= V,
             "argmax: " << ids->ids.numel() << " reduced-vocabulary ids for rows of " << V);
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* r = x.ptr<float>() + i * V;
    // The rule as one scan from entry 0 (a strictly larger value replaces, so
    // NaN never does, and a NaN entry 0 stays): argmax_lowest, bit for bit.
    int64_t best = 0;
    if (!ids) {
      for (int64_t j = 1; j < V; ++j)
        if (r[j] > r[best]) best = j;
    } else {  // the same scan over the full row, -inf outside the ids
      const int32_t* id = ids->ids.ptr<int32_t>();
      const float ninf = -std::numeric_limits<float>::infinity();
      int64_t k = 0;
      float bv = 0.0f;
      for (int64_t j = 0; j < ids->full_vocab; ++j) {
        const float v = k < V && id[k] == j ? r[k++] : ninf;
        if (j == 0 || v > bv) bv = v, best = j;
      }
    }
    out.ptr<int32_t>()[i] = int32_t(best);
  }
}

}  // namespace tf::ops
