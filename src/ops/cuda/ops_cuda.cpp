#include "ops/cuda/ops_cuda.h"

#include <algorithm>

#ifdef TRIFORCE_HAVE_CUDA
#include "activation.cuh"
#include "attention_decode.cuh"
#include "attention_generic.cuh"
#include "attention_prefill.cuh"
#include "common.cuh"
#include "convert.cuh"
#include "device_release.cuh"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "gemm.cuh"
#include "gemm_skinny.cuh"
#include "gemm_skinny_norm.cuh"
#include "pdl.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "sampling.cuh"
#include "softmax_top_p.cuh"
#include "speculative_sampling.cuh"
#include "step_inputs.cuh"
#include "stream.cuh"
#endif

namespace tf::ops::cuda_body {

#ifdef TRIFORCE_HAVE_CUDA

namespace {

void expect_dev(const char* op, const char* what, const Tensor& t, int rank) {
  TF_CHECK(t.device == Device::CUDA, op << ": tensors on different devices (" << what << " is on the CPU, the others on CUDA)");
  TF_CHECK(t.data != nullptr || t.numel() == 0, op << ": " << what << " has no data");
  TF_CHECK(rank < 0 || int(t.shape.size()) == rank,
           op << ": " << what << " has shape " << shape_str(t.shape) << ", expected rank " << rank);
}
void expect_half(const char* op, const char* what, const Tensor& t, DType dt) {
  TF_CHECK(t.dtype == dt, op << ": " << what << " is " << dtype_name(t.dtype) << ", expected " << dtype_name(dt));
  TF_CHECK(cuda::is_half_dtype(dt), op << ": CUDA activations are f16/bf16, got " << dtype_name(dt));
}
int64_t rowlen(const Tensor& t) { return t.shape.empty() ? 1 : t.numel() / t.shape[0]; }

// Split-KV scratch for attention, kept for the process. It grows with the
// context (one split per 512 slots), so it at least doubles each time: a
// long generation reallocates a handful of times, not every 512 tokens. The
// memory plan reserves room for it.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
  float* get(size_t need) {
    if (need > bytes) {
      if (ptr) CUDA_CHECK(cudaFree(ptr));
      ptr = nullptr;
      const size_t grown = std::max(need, 2 * bytes);
      CUDA_CHECK(cudaMalloc(&ptr, grown));
      bytes = grown;
      cuda::at_device_release(release_workspace);
    }
    return static_cast<float*>(ptr);
  }
  static void release_workspace();
};
Workspace& workspace() {
  static Workspace w;
  return w;
}
void Workspace::release_workspace() {  // before exit (release_device_state); errors ignored
  Workspace& w = workspace();
  if (w.ptr) cudaFree(w.ptr);
  w.ptr = nullptr, w.bytes = 0;
}

}  // namespace

void embedding(const Tensor& table, const Tensor& tokens, Tensor& out) {
  expect_dev("embedding", "table", table, 2);
  expect_dev("embedding", "tokens", tokens, 1);
  expect_dev("embedding", "out", out, 2);
  expect_half("embedding", "out", out, table.dtype);
  TF_CHECK(tokens.dtype == DType::I32, "embedding: tokens must be i32");
  TF_CHECK(out.shape[0] == tokens.shape[0] && out.shape[1] == table.shape[1], "embedding: out shape "
                                                                                 << shape_str(out.shape));
  cuda::EmbeddingParams p;
  p.table = table.data, p.tokens = tokens.ptr<int32_t>(), p.out = out.data;
  p.n = tokens.shape[0], p.vocab = table.shape[0], p.d = table.shape[1], p.dtype = table.dtype;
  cuda::embedding(p, cuda::compute_stream());
}

void rmsnorm(const Tensor& x, const Tensor& weight, Tensor& out, const RmsNormParams& rp) {
  expect_dev("rmsnorm", "x", x, 2);
  expect_dev("rmsnorm", "weight", weight, 1);
  expect_dev("rmsnorm", "out", out, 2);
  expect_half("rmsnorm", "x", x, weight.dtype);
  expect_half("rmsnorm", "out", out, weight.dtype);
  TF_CHECK(out.shape == x.shape && weight.shape[0] == x.shape[1], "rmsnorm: shapes do not match");
  cuda::RmsNormParams p;
  p.x = x.data, p.weight = weight.data, p.out = out.data, p.n = x.shape[0], p.d = x.shape[1];
  p.eps = rp.eps, p.dtype = x.dtype;
  cuda::rmsnorm(p, cuda::compute_stream());
}

void add_rmsnorm(Tensor& residual, const Tensor& x, const Tensor& weight, Tensor& out, const RmsNormParams& rp) {
  expect_dev("add_rmsnorm", "residual", residual, 2);
  expect_dev("add_rmsnorm", "x", x, 2);
  expect_dev("add_rmsnorm", "weight", weight, 1);
  expect_dev("add_rmsnorm", "out", out, 2);
  for (const Tensor* t : {static_cast<const Tensor*>(&residual), &x, static_cast<const Tensor*>(&out)}) expect_half("add_rmsnorm", "tensor", *t, weight.dtype);
  TF_CHECK(residual.shape == x.shape && out.shape == x.shape && weight.shape[0] == x.shape[1],
           "add_rmsnorm: shapes do not match");
  cuda::RmsNormParams p;
  p.residual = residual.data, p.x = x.data, p.weight = weight.data, p.out = out.data;
  p.n = x.shape[0], p.d = x.shape[1], p.eps = rp.eps, p.dtype = x.dtype, p.rounded_sum = rp.rounded_sum;
  cuda::rmsnorm(p, cuda::compute_stream());
}

void add_inplace(Tensor& residual, const Tensor& x) {
  expect_dev("add_inplace", "residual", residual, -1);
  expect_dev("add_inplace", "x", x, -1);
  expect_half("add_inplace", "x", x, residual.dtype);
  TF_CHECK(residual.shape == x.shape, "add_inplace: shapes differ");
  cuda::AddParams p;
  p.residual = residual.data, p.x = x.data, p.count = x.numel(), p.dtype = x.dtype;
  cuda::add_inplace(p, cuda::compute_stream());
}

void cast(const Tensor& src, Tensor& dst) {
  expect_dev("cast", "src", src, -1);
  expect_dev("cast", "dst", dst, -1);
  TF_CHECK(src.dtype == DType::F32, "cast: src is " << dtype_name(src.dtype) << ", expected f32");
  TF_CHECK(src.shape == dst.shape, "cast: shapes " << shape_str(src.shape) << " and " << shape_str(dst.shape) << " differ");
  cuda::CastParams p;
  p.in = src.ptr<float>(), p.out = dst.data, p.count = src.numel(), p.dtype = dst.dtype;
  cuda::cast_from_f32(p, cuda::compute_stream());
}

void linear(const Tensor& x, const Tensor& weight, Tensor& y) {
  expect_dev("linear", "x", x, 2);
  expect_dev("linear", "weight", weight, 2);
  expect_dev("linear", "y", y, 2);
  expect_half("linear", "x", x, weight.dtype);
  TF_CHECK(y.dtype == x.dtype || y.dtype == DType::F32,
           "linear: y is " << dtype_name(y.dtype) << ", expected " << dtype_name(x.dtype) << " or f32");
  TF_CHECK(weight.shape[1] == x.shape[1] && y.shape[0] == x.shape[0] && y.shape[1] == weight.shape[0],
           "linear: x " << shape_str(x.shape) << " . W " << shape_str(weight.shape) << "^T into y "
                        << shape_str(y.shape) << " do not match");
  if (x.shape[0] <= cuda::kSkinnyGemmMaxRows && x.shape[1] % 8 == 0) {
    // Decode and verification: the batch-invariant kernel, so a verified row
    // is bit-identical to the one-token step (greedy speculation == ar).
    cuda::SkinnyGemmParams p;
    p.x = x.data, p.w = weight.data, p.y = y.data, p.n = x.shape[0], p.in = x.shape[1], p.out = weight.shape[0];
    p.dtype = x.dtype, p.y_dtype = y.dtype;
    cuda::gemm_skinny(p, cuda::compute_stream());
    return;
  }
  cuda::GemmParams p;
  p.x = x.data, p.w = weight.data, p.y = y.data, p.n = x.shape[0], p.in = x.shape[1], p.out = weight.shape[0];
  p.dtype = x.dtype, p.y_dtype = y.dtype;
  cuda::gemm(p, cuda::compute_stream());
}

void rope_apply_at(Tensor& q, Tensor* k, const Tensor& cos, const Tensor& sin, const Tensor& rows) {
  expect_dev("rope_apply_rows", "q", q, 3);
  expect_dev("rope_apply_rows", "cos", cos, 2);
  expect_dev("rope_apply_rows", "rows", rows, 1);
  TF_CHECK(cos.dtype == DType::F32 && sin.dtype == DType::F32 && rows.dtype == DType::I32,
           "rope_apply_rows: tables must be f32 and rows i32");
  TF_CHECK(q.shape[2] == 2 * cos.shape[1] && sin.shape == cos.shape && rows.shape[0] == q.shape[0],
           "rope_apply_rows: shapes do not match");
  cuda::RopeParams p;
  p.q = q.data, p.k = k ? k->data : nullptr, p.cos = cos.ptr<float>(), p.sin = sin.ptr<float>();
  p.positions = rows.ptr<int32_t>(), p.n = q.shape[0], p.q_heads = q.shape[1], p.k_heads = k ? k->shape[1] : 0;
  p.head_dim = q.shape[2], p.table_rows = cos.shape[0], p.dtype = q.dtype;
  if (k) {
    expect_half("rope_apply_rows", "k", *k, q.dtype);
    TF_CHECK(k->shape[0] == q.shape[0] && k->shape[2] == q.shape[2], "rope_apply_rows: k shape mismatch");
  }
  cuda::rope(p, cuda::compute_stream());
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  expect_dev("silu_mul", "gate", gate, -1);
  expect_dev("silu_mul", "up", up, -1);
  expect_dev("silu_mul", "out", out, -1);
  expect_half("silu_mul", "up", up, gate.dtype);
  expect_half("silu_mul", "out", out, gate.dtype);
  TF_CHECK(gate.shape == up.shape && out.shape == gate.shape, "silu_mul: shapes differ");
  cuda::SiluMulParams p;
  p.gate = gate.data, p.up = up.data, p.out = out.data, p.count = gate.numel(), p.dtype = gate.dtype;
  p.vec8 = gate.shape.size() == 2 && gate.shape[0] > cuda::kSkinnyGemmMaxRows;  // prefill rows only
  if (p.vec8) p.cols = p.ld = gate.shape[1];
  cuda::silu_mul(p, cuda::compute_stream());
}

bool linear_silu_mul_halves(const Tensor& gate_up, const Tensor& weight, Tensor& y) {
  expect_dev("linear_silu_mul_halves", "gate_up", gate_up, 2);
  expect_dev("linear_silu_mul_halves", "weight", weight, 2);
  expect_dev("linear_silu_mul_halves", "y", y, 2);
  expect_half("linear_silu_mul_halves", "weight", weight, gate_up.dtype);
  TF_CHECK(y.dtype == gate_up.dtype || y.dtype == DType::F32,
           "linear_silu_mul_halves: y is " << dtype_name(y.dtype) << ", expected " << dtype_name(gate_up.dtype) << " or f32");
  const int64_t n = gate_up.shape[0], inter = weight.shape[1];
  TF_CHECK(y.shape[0] == n && y.shape[1] == weight.shape[0],
           "linear_silu_mul_halves: y " << shape_str(y.shape) << " does not match [" << n << ", " << weight.shape[0] << "]");
  if (n > cuda::kSkinnyGemmMaxRows || inter % 8 != 0 || !cuda::gemm_skinny_fuses_silu_mul()) return false;
  cuda::SkinnyGemmParams p;
  p.x = gate_up.data, p.w = weight.data, p.y = y.data, p.n = n, p.in = inter, p.out = weight.shape[0];
  p.dtype = gate_up.dtype, p.y_dtype = y.dtype, p.x_silu_mul_halves = true;
  cuda::gemm_skinny(p, cuda::compute_stream());
  return true;
}

namespace {
// norm_linear's checks and kernel params, or false where the norm prologue
// cannot take the shape. y: the GEMM's [n, out] output (nullptr: an epilogue
// stores elsewhere).
bool norm_gemm_params(const char* op, const Tensor& residual, const Tensor* add, Tensor* sum_out,
                      const Tensor& norm_weight, const RmsNormParams& np, const Tensor& weight, const Tensor* y,
                      cuda::SkinnyNormGemmParams& p) {
  expect_dev(op, "residual", residual, 2);
  expect_dev(op, "norm_weight", norm_weight, 1);
  expect_dev(op, "weight", weight, 2);
  if (y) expect_dev(op, "y", *y, 2);
  for (const Tensor* t : {&norm_weight, &weight, y, add, static_cast<const Tensor*>(sum_out)})
    if (t) expect_half(op, "tensor", *t, residual.dtype);
  const int64_t n = residual.shape[0], in = residual.shape[1];
  TF_CHECK(norm_weight.shape[0] == in && weight.shape[1] == in &&
               (!y || (y->shape[0] == n && y->shape[1] == weight.shape[0])) &&
               (!add || add->shape == residual.shape) && (!sum_out || sum_out->shape == residual.shape),
           op << ": shapes do not match (residual " << shape_str(residual.shape) << ", W "
              << shape_str(weight.shape) << (y ? ", y " + shape_str(y->shape) : std::string()) << ")");
  if (cuda::gemm_skinny_norm_unsupported(n, in, residual.dtype)) return false;
  p.residual = residual.data, p.add = add ? add->data : nullptr, p.sum_out = sum_out ? sum_out->data : nullptr;
  p.norm_weight = norm_weight.data, p.eps = np.eps, p.rounded_sum = np.rounded_sum;
  p.w = weight.data, p.y = y ? y->data : nullptr, p.n = n, p.in = in, p.out = weight.shape[0];
  p.dtype = residual.dtype;
  return true;
}
}  // namespace

bool norm_linear(const Tensor& residual, const Tensor* add, Tensor* sum_out, const Tensor& norm_weight,
                 const RmsNormParams& np, const Tensor& weight, Tensor& y) {
  cuda::SkinnyNormGemmParams p;
  if (!norm_gemm_params("norm_linear", residual, add, sum_out, norm_weight, np, weight, &y, p)) return false;
  cuda::gemm_skinny_norm(p, cuda::compute_stream());
  return true;
}

void silu_mul_halves(const Tensor& gate_up, Tensor& out) {
  expect_dev("silu_mul_halves", "gate_up", gate_up, 2);
  expect_dev("silu_mul_halves", "out", out, 2);
  expect_half("silu_mul_halves", "out", out, gate_up.dtype);
  const int64_t inter = out.shape[1];
  cuda::SiluMulParams p;
  p.gate = gate_up.data, p.up = static_cast<const uint8_t*>(gate_up.data) + size_t(inter) * dtype_size(gate_up.dtype);
  p.out = out.data, p.count = out.numel(), p.dtype = out.dtype, p.cols = inter, p.ld = 2 * inter;
  p.vec8 = out.shape[0] > cuda::kSkinnyGemmMaxRows;  // prefill rows only
  cuda::silu_mul(p, cuda::compute_stream());
}

namespace {
// Everything of rope_qkv's params but its inputs: q_out [n, heads, hd]; k_dst,
// v_dst one cache layer [kv_heads, capacity, hd] at *slots (to_cache) or [n, kv_heads, hd].
cuda::RopeQkvParams rope_destination(const Tensor& cos, const Tensor& sin, const Tensor& rows, const Tensor* slots,
                                     Tensor& q_out, Tensor& k_dst, Tensor& v_dst, bool to_cache) {
  const int64_t D = q_out.shape[2];
  cuda::RopeQkvParams p;
  p.q_out = q_out.data, p.k_out = k_dst.data, p.v_out = v_dst.data;
  if (to_cache) {
    p.out_head_stride = k_dst.shape[1] * D, p.out_slot_stride = D;
    p.slots = slots->ptr<int32_t>(), p.slot_limit = k_dst.shape[1];
    p.kv_heads = k_dst.shape[0];
  } else {
    p.out_head_stride = D, p.out_slot_stride = k_dst.shape[1] * D, p.slot_limit = q_out.shape[0];
    p.kv_heads = k_dst.shape[1];
  }
  p.cos = cos.ptr<float>(), p.sin = sin.ptr<float>(), p.rows = rows.ptr<int32_t>(), p.table_rows = cos.shape[0];
  p.n = q_out.shape[0], p.q_heads = q_out.shape[1], p.head_dim = D, p.dtype = q_out.dtype;
  return p;
}

// Whether the skinny GEMM's epilogue fusions take x [n, in] . W^T (gemm_skinny.cuh).
bool epilogue_fits(const Tensor& x, const Tensor& w) {
  return x.shape[0] <= cuda::kSkinnyGemmMaxRows && x.shape[1] % 8 == 0 && cuda::gemm_skinny_fuses_silu_mul();
}
cuda::SkinnyGemmParams epilogue_gemm(const Tensor& x, const Tensor& w) {
  cuda::SkinnyGemmParams p;
  p.x = x.data, p.w = w.data, p.n = x.shape[0], p.in = x.shape[1], p.out = w.shape[0];
  p.dtype = p.y_dtype = x.dtype;
  return p;
}
}  // namespace

void rope_qkv(const QKVRows& in, const Tensor& cos, const Tensor& sin, const Tensor& rows, const Tensor* slots,
              Tensor& q_out, Tensor& k_dst, Tensor& v_dst, bool to_cache) {
  const char* op = to_cache ? "rope_qkv_to_cache" : "rope_qkv_split";
  expect_dev(op, "q", in.q, 3);
  expect_dev(op, "cos", cos, 2);
  expect_dev(op, "rows", rows, 1);
  expect_half(op, "q", in.q, in.q.dtype);
  cuda::RopeQkvParams p = rope_destination(cos, sin, rows, slots, q_out, k_dst, v_dst, to_cache);
  p.q = in.q.data, p.k = in.k.data, p.v = in.v.data, p.q_ld = in.q_ld, p.k_ld = in.k_ld, p.v_ld = in.v_ld;
  p.vec8 = p.n > cuda::kSkinnyGemmMaxRows;  // prefill rows only
  cuda::rope_qkv(p, cuda::compute_stream());
}

bool linear_gate_up_silu(const Tensor& x, const Tensor& w_gate_up, Tensor& out) {
  const char* op = "linear_gate_up_silu";
  expect_dev(op, "x", x, 2);
  expect_dev(op, "w_gate_up", w_gate_up, 2);
  expect_dev(op, "out", out, 2);
  expect_half(op, "w_gate_up", w_gate_up, x.dtype);
  expect_half(op, "out", out, x.dtype);
  if (!epilogue_fits(x, w_gate_up) || out.shape[1] % 8 != 0) return false;
  cuda::SkinnyGemmParams p = epilogue_gemm(x, w_gate_up);
  p.y = out.data;
  cuda::gemm_skinny_gate_up_silu(p, cuda::compute_stream());
  return true;
}

bool linear_rope_qkv_to_cache(const Tensor& x, const Tensor& w_qkv, const Tensor& cos, const Tensor& sin,
                              const Tensor& rows, const Tensor& slots, Tensor& q_out, Tensor& k_cache,
                              Tensor& v_cache) {
  const char* op = "linear_rope_qkv_to_cache";
  expect_dev(op, "x", x, 2);
  expect_dev(op, "w_qkv", w_qkv, 2);
  expect_dev(op, "q_out", q_out, 3);
  expect_dev(op, "cos", cos, 2);
  expect_dev(op, "rows", rows, 1);
  expect_dev(op, "slots", slots, 1);
  expect_half(op, "w_qkv", w_qkv, x.dtype);
  expect_half(op, "q_out", q_out, x.dtype);
  if (!epilogue_fits(x, w_qkv) || q_out.shape[2] % 16 != 0) return false;
  const cuda::RopeQkvParams r = rope_destination(cos, sin, rows, &slots, q_out, k_cache, v_cache, true);
  cuda::gemm_skinny_qkv_rope(epilogue_gemm(x, w_qkv), r, cuda::compute_stream());
  return true;
}

bool norm_linear_gate_up_silu(const Tensor& residual, const Tensor* add, Tensor* sum_out, const Tensor& norm_weight,
                              const RmsNormParams& np, const Tensor& w_gate_up, Tensor& out) {
  const char* op = "norm_linear_gate_up_silu";
  expect_dev(op, "out", out, 2);
  expect_half(op, "out", out, residual.dtype);
  TF_CHECK(w_gate_up.shape.size() == 2 && w_gate_up.shape[0] == 2 * out.shape[1] && out.shape[0] == residual.shape[0],
           op << ": W " << shape_str(w_gate_up.shape) << " and out " << shape_str(out.shape)
              << " do not match (expected [2 inter, in] and [n, inter])");
  cuda::SkinnyNormGemmParams p;
  if (!norm_gemm_params(op, residual, add, sum_out, norm_weight, np, w_gate_up, nullptr, p)) return false;
  if (out.shape[1] % 8 != 0) return false;
  p.y = out.data;
  cuda::gemm_skinny_norm_gate_up_silu(p, cuda::compute_stream());
  return true;
}

bool norm_linear_rope_qkv_to_cache(const Tensor& residual, const Tensor* add, Tensor* sum_out,
                                   const Tensor& norm_weight, const RmsNormParams& np, const Tensor& w_qkv,
                                   const Tensor& cos, const Tensor& sin, const Tensor& rows, const Tensor& slots,
                                   Tensor& q_out, Tensor& k_cache, Tensor& v_cache) {
  const char* op = "norm_linear_rope_qkv_to_cache";
  expect_dev(op, "q_out", q_out, 3);
  expect_dev(op, "cos", cos, 2);
  expect_dev(op, "rows", rows, 1);
  expect_dev(op, "slots", slots, 1);
  expect_half(op, "q_out", q_out, residual.dtype);
  cuda::SkinnyNormGemmParams p;
  if (!norm_gemm_params(op, residual, add, sum_out, norm_weight, np, w_qkv, nullptr, p)) return false;
  if (q_out.shape[2] % 16 != 0) return false;
  const cuda::RopeQkvParams r = rope_destination(cos, sin, rows, &slots, q_out, k_cache, v_cache, true);
  cuda::gemm_skinny_norm_qkv_rope(p, r, cuda::compute_stream());
  return true;
}

void attention(const Tensor& q, const Tensor& q_slots, const KVView& kv, Tensor& out, const AttentionParams& ap) {
  expect_dev("attention", "q", q, 3);
  expect_dev("attention", "q_slots", q_slots, 1);
  expect_dev("attention", "out", out, 3);
  expect_half("attention", "out", out, q.dtype);
  TF_CHECK(kv.device == Device::CUDA && kv.dev_k && kv.dev_v && kv.dev_length,
           "attention: the KV view is not a CUDA cache view");
  TF_CHECK(kv.dtype == q.dtype, "attention: KV is " << dtype_name(kv.dtype) << ", q " << dtype_name(q.dtype));
  TF_CHECK(q.shape[1] == ap.num_heads && q.shape[2] == ap.head_dim && out.shape == q.shape &&
               q_slots.shape[0] == q.shape[0] && kv.num_kv_heads == ap.num_kv_heads,
           "attention: q " << shape_str(q.shape) << " does not match heads=" << ap.num_heads);
  const int64_t n = q.shape[0];
  if (ap.head_dim != 64 && ap.head_dim != 128) {  // tiny test models: the simple kernel
    cuda::AttentionGenericParams g;
    g.q = q.data, g.k_cache = kv.dev_k, g.v_cache = kv.dev_v, g.out = out.data, g.kv_length = kv.dev_length;
    g.q_slots = q_slots.ptr<int32_t>(), g.n = n, g.num_heads = ap.num_heads, g.num_kv_heads = ap.num_kv_heads;
    g.head_dim = ap.head_dim, g.head_stride = kv.head_stride, g.token_stride = kv.token_stride;
    g.scale = ap.scale, g.dtype = q.dtype;
    cuda::attention_generic(g, cuda::compute_stream());
    return;
  }
  if (n > 32) {  // prefill-sized calls: the tensor-core flash kernel (queries are the last n slots)
    TF_CHECK(kv.length >= n, "attention: " << n << " queries but the KV view holds " << kv.length << " slots");
    cuda::AttentionPrefillParams pp;
    pp.q = q.data, pp.k_cache = kv.dev_k, pp.v_cache = kv.dev_v, pp.out = out.data;
    pp.n = n, pp.kv_length = kv.length, pp.num_heads = ap.num_heads, pp.num_kv_heads = ap.num_kv_heads;
    pp.head_dim = ap.head_dim, pp.capacity = kv.capacity, pp.head_stride = kv.head_stride;
    pp.token_stride = kv.token_stride, pp.scale = ap.scale, pp.dtype = q.dtype;
    cuda::attention_prefill(pp, cuda::compute_stream());
    return;
  }
  const int64_t per = 32;  // the decode kernel's query limit; longer calls go block by block
  const int64_t row = ap.num_heads * ap.head_dim;
  for (int64_t i0 = 0; i0 < n; i0 += per) {
    const int64_t m = std::min(per, n - i0);
    cuda::AttentionDecodeParams p;
    p.q = static_cast<const uint8_t*>(q.data) + size_t(i0 * row) * dtype_size(q.dtype);
    p.out = static_cast<uint8_t*>(out.data) + size_t(i0 * row) * dtype_size(q.dtype);
    p.k_cache = kv.dev_k, p.v_cache = kv.dev_v, p.kv_length = kv.dev_length;
    p.q_positions = q_slots.ptr<int32_t>() + i0;
    p.n = m, p.num_heads = ap.num_heads, p.num_kv_heads = ap.num_kv_heads, p.head_dim = ap.head_dim;
    p.capacity = kv.capacity, p.head_stride = kv.head_stride, p.token_stride = kv.token_stride;
    p.max_length = std::max<int64_t>(1, ap.grid_slots > 0 ? ap.grid_slots : kv.length);
    // Fixed splits from slot 0: a query's output is then the same in a
    // 7-token verification and in its own decode step (batch invariance).
    p.split_slots = ap.split_slots > 0 ? ap.split_slots : attention_split_slots();
    p.scale = ap.scale, p.dtype = q.dtype, p.combine_in_split = ap.combine_in_split;
    p.direct_single_split = ap.direct_single_split;
    const size_t need = cuda::attention_decode_workspace_bytes(p);
    if (ap.workspace) {
      TF_CHECK(n <= per && ap.workspace_bytes >= need,
               "attention: caller workspace of " << ap.workspace_bytes << " bytes, the call needs " << need);
      p.workspace = static_cast<float*>(ap.workspace);
    } else {
      p.workspace = workspace().get(need);
    }
    cuda::attention_decode(p, cuda::compute_stream());
  }
}

void argmax(const Tensor& x, Tensor& out, const ArgmaxIds* ids) {
  expect_dev("argmax", "x", x, 2);
  expect_dev("argmax", "out", out, 1);
  TF_CHECK(x.dtype == DType::F32 && out.dtype == DType::I32 && out.shape[0] == x.shape[0],
           "argmax: expected f32 [n, vocab] into i32 [n]");
  cuda::ArgmaxParams p;
  p.x = x.ptr<float>(), p.out = out.ptr<int32_t>(), p.n = x.shape[0], p.vocab = x.shape[1];
  if (ids) {
    expect_dev("argmax", "ids", ids->ids, 1);
    TF_CHECK(ids->ids.dtype == DType::I32 && ids->ids.numel() == x.shape[1] && ids->full_vocab >= x.shape[1],
             "argmax: " << ids->ids.numel() << " reduced-vocabulary ids for rows of " << x.shape[1]);
    p.ids = ids->ids.ptr<int32_t>(), p.full_vocab = ids->full_vocab, p.first_missing = ids->first_missing;
  }
  cuda::argmax(p, cuda::compute_stream());
}

void softmax_top_p(const Tensor& logits, Tensor& probs, const SoftmaxParams& sp) {
  // ops::softmax_top_p has checked dtypes, shapes, temperature and top_p.
  expect_dev("softmax_top_p", "logits", logits, 2);
  expect_dev("softmax_top_p", "probs", probs, 2);
  TF_CHECK(logits.shape[1] <= cuda::kSoftmaxTopPMaxVocab,
           "softmax_top_p: vocabulary " << logits.shape[1] << " exceeds the CUDA kernel's " << cuda::kSoftmaxTopPMaxVocab);
  cuda::SoftmaxTopPParams p;
  p.logits = logits.ptr<float>(), p.probs = probs.ptr<float>(), p.n = logits.shape[0], p.vocab = logits.shape[1];
  p.temperature = sp.temperature, p.top_p = sp.top_p, p.min_tokens_to_keep = sp.min_tokens_to_keep;
  cuda::softmax_top_p(p, cuda::compute_stream());
}

void draw_rows(const Tensor& probs, Tensor& out, uint64_t seed, uint64_t counter) {
  expect_dev("draw_rows", "probs", probs, 2);
  expect_dev("draw_rows", "out", out, 1);
  TF_CHECK(probs.dtype == DType::F32 && out.dtype == DType::I32 && out.shape[0] == probs.shape[0],
           "draw_rows: expected f32 [n, vocab] into i32 [n], got " << shape_str(probs.shape) << " into "
                                                                  << shape_str(out.shape));
  cuda::DrawRowsParams p;
  p.probs = probs.ptr<float>(), p.out = out.ptr<int32_t>(), p.n = probs.shape[0], p.vocab = probs.shape[1];
  p.seed = seed, p.counter = counter;
  cuda::draw_rows(p, cuda::compute_stream());
}

void verify_rows(const Tensor& q, const Tensor& p, const std::vector<int32_t>& x, uint64_t seed, uint64_t counter,
                 bool residual, Tensor& out) {
  expect_dev("verify_rows", "q", q, 2);
  expect_dev("verify_rows", "p", p, 2);
  expect_dev("verify_rows", "out", out, 1);
  const int64_t g = int64_t(x.size());
  TF_CHECK(q.dtype == DType::F32 && p.dtype == DType::F32 && out.dtype == DType::I32 && out.shape[0] >= 3,
           "verify_rows: expected f32 q and p rows into i32 [3]");
  TF_CHECK(p.shape[1] == q.shape[1] && q.shape[0] >= g && p.shape[0] >= g + 1,
           "verify_rows: " << g << " proposals need q [>= " << g << ", V] and p [>= " << g + 1 << ", V], got q "
                           << shape_str(q.shape) << " and p " << shape_str(p.shape));
  TF_CHECK(g <= cuda::kMaxVerifyProposals,
           "verify_rows: " << g << " proposals exceed the kernel's " << cuda::kMaxVerifyProposals);
  cuda::VerifyRowsParams vp;
  vp.q = q.ptr<float>(), vp.p = p.ptr<float>(), vp.g = g, vp.vocab = p.shape[1];
  std::copy(x.begin(), x.end(), vp.x);
  vp.seed = seed, vp.counter = counter, vp.residual = residual, vp.out = out.ptr<int32_t>();
  cuda::verify_rows(vp, cuda::compute_stream());
}

void expand_columns(const Tensor& in, const Tensor& ids, float fill, Tensor& out) {
  expect_dev("expand_columns", "in", in, 2);
  expect_dev("expand_columns", "ids", ids, 1);
  expect_dev("expand_columns", "out", out, 2);
  TF_CHECK(in.dtype == DType::F32 && out.dtype == DType::F32 && ids.dtype == DType::I32 &&
               ids.shape[0] == in.shape[1] && out.shape[0] == in.shape[0] && out.shape[1] >= in.shape[1],
           "expand_columns: expected f32 [n, k] with i32 [k] ids into f32 [n, >= k], got "
               << shape_str(in.shape) << ", " << shape_str(ids.shape) << ", " << shape_str(out.shape));
  TF_CHECK(in.data != out.data, "expand_columns: out must not alias in");
  cuda::ExpandColumnsParams p;
  p.in = in.ptr<float>(), p.ids = ids.ptr<int32_t>(), p.out = out.ptr<float>();
  p.n = in.shape[0], p.k = in.shape[1], p.vocab = out.shape[1], p.fill = fill;
  cuda::expand_columns(p, cuda::compute_stream());
}

#else  // built without CUDA

namespace {
[[noreturn]] void none(const char* op) { TF_FAIL(op << ": tensor is on CUDA but triforce was built without CUDA"); }
}  // namespace
void embedding(const Tensor&, const Tensor&, Tensor&) { none("embedding"); }
void rmsnorm(const Tensor&, const Tensor&, Tensor&, const RmsNormParams&) { none("rmsnorm"); }
void add_rmsnorm(Tensor&, const Tensor&, const Tensor&, Tensor&, const RmsNormParams&) { none("add_rmsnorm"); }
void add_inplace(Tensor&, const Tensor&) { none("add_inplace"); }
void cast(const Tensor&, Tensor&) { none("cast"); }
void linear(const Tensor&, const Tensor&, Tensor&) { none("linear"); }
void rope_apply_at(Tensor&, Tensor*, const Tensor&, const Tensor&, const Tensor&) { none("rope_apply_rows"); }
void silu_mul(const Tensor&, const Tensor&, Tensor&) { none("silu_mul"); }
void silu_mul_halves(const Tensor&, Tensor&) { none("silu_mul_halves"); }
bool linear_silu_mul_halves(const Tensor&, const Tensor&, Tensor&) { none("linear_silu_mul_halves"); }
bool norm_linear(const Tensor&, const Tensor*, Tensor*, const Tensor&, const RmsNormParams&, const Tensor&, Tensor&) {
  none("norm_linear");
}
void rope_qkv(const QKVRows&, const Tensor&, const Tensor&, const Tensor&, const Tensor*, Tensor&, Tensor&, Tensor&,
              bool to_cache) {
  none(to_cache ? "rope_qkv_to_cache" : "rope_qkv_split");
}
bool linear_gate_up_silu(const Tensor&, const Tensor&, Tensor&) { none("linear_gate_up_silu"); }
bool linear_rope_qkv_to_cache(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              Tensor&, Tensor&, Tensor&) {
  none("linear_rope_qkv_to_cache");
}
bool norm_linear_gate_up_silu(const Tensor&, const Tensor*, Tensor*, const Tensor&, const RmsNormParams&, const Tensor&,
                              Tensor&) {
  none("norm_linear_gate_up_silu");
}
bool norm_linear_rope_qkv_to_cache(const Tensor&, const Tensor*, Tensor*, const Tensor&, const RmsNormParams&,
                                   const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                   Tensor&, Tensor&) {
  none("norm_linear_rope_qkv_to_cache");
}
void attention(const Tensor&, const Tensor&, const KVView&, Tensor&, const AttentionParams&) { none("attention"); }
void argmax(const Tensor&, Tensor&, const ArgmaxIds*) { none("argmax"); }
void softmax_top_p(const Tensor&, Tensor&, const SoftmaxParams&) { none("softmax_top_p"); }
void draw_rows(const Tensor&, Tensor&, uint64_t, uint64_t) { none("draw_rows"); }
void verify_rows(const Tensor&, const Tensor&, const std::vector<int32_t>&, uint64_t, uint64_t, bool, Tensor&) {
  none("verify_rows");
}
void expand_columns(const Tensor&, const Tensor&, float, Tensor&) { none("expand_columns"); }

#endif

}  // namespace tf::ops::cuda_body

namespace tf::ops {

#ifdef TRIFORCE_HAVE_CUDA
StepLaunchOverlap::StepLaunchOverlap(bool on) { cuda::pdl_begin(on); }
StepLaunchOverlap::~StepLaunchOverlap() { cuda::pdl_end(); }
void step_launch_break() { cuda::pdl_break(); }
void stage_step_inputs(const StepInputs& in) {
  cuda::StepInputsParams p;
  p.ints_host = in.ints_host, p.ints = static_cast<int32_t*>(in.ints), p.n_ints = in.n_ints;
  p.rows_host = in.rows_host, p.rows = static_cast<float*>(in.rows), p.n_rows = in.n_rows;
  p.token = in.token;
  cuda::step_inputs(p, cuda::compute_stream());
}
int64_t step_inputs_launches() { return cuda::step_inputs_launches(); }
int64_t step_overlapped_launches() { return cuda::pdl_launches(); }
int64_t attention_direct_launches() { return cuda::attention_decode_direct_launches(); }
#else
StepLaunchOverlap::StepLaunchOverlap(bool) {}
StepLaunchOverlap::~StepLaunchOverlap() {}
void step_launch_break() {}
void stage_step_inputs(const StepInputs&) { TF_CHECK(false, "stage_step_inputs: built without CUDA"); }
int64_t step_inputs_launches() { return 0; }
int64_t step_overlapped_launches() { return 0; }
int64_t attention_direct_launches() { return 0; }
#endif

}  // namespace tf::ops
