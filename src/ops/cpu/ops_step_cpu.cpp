// The ops that fuse parts of one forward step (ops.h: qkv_rows,
// rope_qkv_split, rope_qkv_to_cache, silu_mul_halves, and the GEMMs with
// those in their epilogue): shape checks shared by
// both devices, the device dispatch, and the f32 CPU bodies, which compute
// exactly what the unfused CPU ops (rope_apply_rows, a cache write, silu_mul) do.
#include <cmath>
#include <cstring>

#include "ops/cuda/ops_cuda.h"
#include "ops/ops.h"

namespace tf::ops {

namespace {

void same_place(const char* op, const Tensor& ref, std::initializer_list<const Tensor*> ts, DType dt) {
  for (const Tensor* t : ts) {
    TF_CHECK(t->device == ref.device, op << ": tensors on different devices");
    TF_CHECK(t->dtype == dt, op << ": a tensor is " << dtype_name(t->dtype) << ", expected " << dtype_name(dt));
    TF_CHECK(t->data != nullptr || t->numel() == 0, op << ": a tensor has no data");
  }
}

// in, tables and rows agree; returns n.
int64_t check_rope_inputs(const char* op, const QKVRows& in, const Tensor& cos, const Tensor& sin, const Tensor& rows,
                          const Tensor& q_out) {
  TF_CHECK(in.q.shape.size() == 3 && in.k.shape.size() == 3 && in.v.shape.size() == 3,
           op << ": q, k, v must be [n, heads, head_dim], got " << shape_str(in.q.shape) << ", "
              << shape_str(in.k.shape) << ", " << shape_str(in.v.shape));
  const int64_t n = in.q.shape[0], H = in.q.shape[1], KH = in.k.shape[1], D = in.q.shape[2];
  TF_CHECK(in.k.shape == std::vector<int64_t>({n, KH, D}) && in.v.shape == in.k.shape,
           op << ": k " << shape_str(in.k.shape) << " / v " << shape_str(in.v.shape) << " do not match q "
              << shape_str(in.q.shape));
  TF_CHECK(in.q_ld >= H * D && in.k_ld >= KH * D && in.v_ld >= KH * D,
           op << ": row strides " << in.q_ld << "/" << in.k_ld << "/" << in.v_ld << " shorter than the rows");
  TF_CHECK(cos.shape.size() == 2 && cos.shape[1] * 2 == D && sin.shape == cos.shape,
           op << ": tables " << shape_str(cos.shape) << " do not match head_dim " << D);
  TF_CHECK(rows.dtype == DType::I32 && rows.numel() == n && rows.device == in.q.device,
           op << ": rows must be i32 [" << n << "] on the tensors' device");
  TF_CHECK(q_out.shape == in.q.shape, op << ": q_out " << shape_str(q_out.shape) << ", expected "
                                         << shape_str(in.q.shape));
  same_place(op, in.q, {&in.k, &in.v, &q_out}, in.q.dtype);
  same_place(op, in.q, {&cos, &sin}, DType::F32);
  return n;
}

// dst = rope(src) for one head row (f32): the arithmetic of rope_apply_rows.
void rotate_row(const float* src, float* dst, const float* c, const float* s, int64_t half) {
  for (int64_t j = 0; j < half; ++j) {
    const float x1 = src[j], x2 = src[j + half];
    dst[j] = x1 * c[j] - x2 * s[j];
    dst[j + half] = x2 * c[j] + x1 * s[j];
  }
}

// k and v of token t, head h go to k_out/v_out + h * head_stride + slot(t) * slot_stride.
void rope_qkv_cpu(const char* op, const QKVRows& in, const Tensor& cos, const Tensor& sin, const Tensor& rows,
                  const int32_t* slots, int64_t slot_limit, Tensor& q_out, float* k_out, float* v_out,
                  int64_t head_stride, int64_t slot_stride) {
  TF_CHECK(in.q.dtype == DType::F32, op << ": CPU tensors must be f32, got " << dtype_name(in.q.dtype));
  const int64_t n = in.q.shape[0], H = in.q.shape[1], KH = in.k.shape[1], D = in.q.shape[2], half = D / 2;
  for (int64_t t = 0; t < n; ++t) {
    const int32_t r = rows.ptr<int32_t>()[t];
    TF_CHECK(r >= 0 && r < cos.shape[0], op << ": row " << r << " outside the tables of " << cos.shape[0]);
    const int64_t slot = slots ? slots[t] : t;
    TF_CHECK(slot >= 0 && slot < slot_limit, op << ": slot " << slot << " outside [0, " << slot_limit << ")");
    const float* c = cos.ptr<float>() + int64_t(r) * half;
    const float* s = sin.ptr<float>() + int64_t(r) * half;
    for (int64_t h = 0; h < H; ++h)
      rotate_row(in.q.ptr<float>() + t * in.q_ld + h * D, q_out.ptr<float>() + (t * H + h) * D, c, s, half);
    for (int64_t h = 0; h < KH; ++h) {
      const int64_t at = h * head_stride + slot * slot_stride;
      rotate_row(in.k.ptr<float>() + t * in.k_ld + h * D, k_out + at, c, s, half);
      std::memmove(v_out + at, in.v.ptr<float>() + t * in.v_ld + h * D, size_t(D) * sizeof(float));
    }
  }
}

}  // namespace

QKVRows qkv_rows(const Tensor& q, const Tensor& k, const Tensor& v) {
  TF_CHECK(q.shape.size() == 3 && k.shape.size() == 3 && v.shape.size() == 3,
           "qkv_rows: q, k, v must be [n, heads, head_dim]");
  QKVRows r;
  r.q = q, r.k = k, r.v = v;
  r.q_ld = q.shape[1] * q.shape[2], r.k_ld = k.shape[1] * k.shape[2], r.v_ld = v.shape[1] * v.shape[2];
  return r;
}

QKVRows qkv_rows(const Tensor& qkv, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t ld = (heads + 2 * kv_heads) * head_dim;
  TF_CHECK(qkv.shape.size() == 2 && qkv.shape[1] == ld,
           "qkv_rows: stacked q/k/v output " << shape_str(qkv.shape) << ", expected [n, " << ld << "]");
  auto at = [&](int64_t col, int64_t h) {
    Tensor t = qkv;
    t.owner = nullptr;
    t.shape = {qkv.shape[0], h, head_dim};
    t.data = static_cast<uint8_t*>(qkv.data) + size_t(col) * dtype_size(qkv.dtype);
    return t;
  };
  QKVRows r;
  r.q = at(0, heads), r.k = at(heads * head_dim, kv_heads), r.v = at((heads + kv_heads) * head_dim, kv_heads);
  r.q_ld = r.k_ld = r.v_ld = ld;
  return r;
}

void rope_qkv_split(const QKVRows& in, const Tensor& cos, const Tensor& sin, const Tensor& rows, Tensor& q_out,
                    Tensor& k_out, Tensor& v_out) {
  const char* op = "rope_qkv_split";
  check_rope_inputs(op, in, cos, sin, rows, q_out);
  TF_CHECK(k_out.shape == in.k.shape && v_out.shape == in.k.shape,
           op << ": k_out " << shape_str(k_out.shape) << " / v_out " << shape_str(v_out.shape) << ", expected "
              << shape_str(in.k.shape));
  same_place(op, in.q, {&k_out, &v_out}, in.q.dtype);
  if (in.q.device == Device::CUDA) return cuda_body::rope_qkv(in, cos, sin, rows, nullptr, q_out, k_out, v_out, false);
  const int64_t n = in.k.shape[0], KH = in.k.shape[1], D = in.k.shape[2];
  rope_qkv_cpu(op, in, cos, sin, rows, nullptr, n, q_out, k_out.ptr<float>(), v_out.ptr<float>(), D, KH * D);
}

namespace {
// rope_qkv_to_cache's checks beyond check_rope_inputs.
void check_cache_outputs(const char* op, const QKVRows& in, const Tensor& slots, const Tensor& k_cache,
                         const Tensor& v_cache) {
  const int64_t n = in.q.shape[0], KH = in.k.shape[1], D = in.k.shape[2];
  TF_CHECK(k_cache.shape.size() == 3 && k_cache.shape[0] == KH && k_cache.shape[2] == D && v_cache.shape == k_cache.shape,
           op << ": cache layer " << shape_str(k_cache.shape) << ", expected [" << KH << ", capacity, " << D << "]");
  TF_CHECK(slots.dtype == DType::I32 && slots.numel() == n && slots.device == in.q.device,
           op << ": slots must be i32 [" << n << "] on the tensors' device");
  same_place(op, in.q, {&k_cache, &v_cache}, in.q.dtype);
}
}  // namespace

void rope_qkv_to_cache(const QKVRows& in, const Tensor& cos, const Tensor& sin, const Tensor& rows,
                       const Tensor& slots, Tensor& q_out, Tensor& k_cache, Tensor& v_cache) {
  const char* op = "rope_qkv_to_cache";
  check_rope_inputs(op, in, cos, sin, rows, q_out);
  check_cache_outputs(op, in, slots, k_cache, v_cache);
  if (in.q.device == Device::CUDA) return cuda_body::rope_qkv(in, cos, sin, rows, &slots, q_out, k_cache, v_cache, true);
  const int64_t D = in.k.shape[2];
  const int64_t cap = k_cache.shape[1];
  rope_qkv_cpu(op, in, cos, sin, rows, slots.ptr<int32_t>(), cap, q_out, k_cache.ptr<float>(), v_cache.ptr<float>(),
               cap * D, D);
}

void linear_rope_qkv_to_cache(const Tensor& x, const Tensor& w_qkv, const Tensor& cos, const Tensor& sin,
                              const Tensor& rows, const Tensor& slots, Tensor& q_out, Tensor& k_cache,
                              Tensor& v_cache, Tensor& scratch) {
  const char* op = "linear_rope_qkv_to_cache";
  TF_CHECK(q_out.shape.size() == 3 && k_cache.shape.size() == 3,
           op << ": q_out " << shape_str(q_out.shape) << " / cache layer " << shape_str(k_cache.shape)
              << ", expected [n, heads, hd] / [kv_heads, capacity, hd]");
  TF_CHECK(x.shape.size() == 2 && w_qkv.shape.size() == 2 && w_qkv.shape[1] == x.shape[1] &&
               scratch.shape == std::vector<int64_t>({x.shape[0], w_qkv.shape[0]}),
           op << ": x " << shape_str(x.shape) << " . W " << shape_str(w_qkv.shape) << "^T into scratch "
              << shape_str(scratch.shape) << " do not match");
  // The checks of rope_qkv_to_cache on the GEMM output's views, which the one kernel never writes.
  const QKVRows in = qkv_rows(scratch, q_out.shape[1], k_cache.shape[0], q_out.shape[2]);
  check_rope_inputs(op, in, cos, sin, rows, q_out);
  check_cache_outputs(op, in, slots, k_cache, v_cache);
  same_place(op, x, {&w_qkv, &scratch}, x.dtype);
  if (x.device == Device::CUDA &&
      cuda_body::linear_rope_qkv_to_cache(x, w_qkv, cos, sin, rows, slots, q_out, k_cache, v_cache))
    return;
  linear(x, w_qkv, scratch);
  rope_qkv_to_cache(in, cos, sin, rows, slots, q_out, k_cache, v_cache);
}

void linear_gate_up_silu(const Tensor& x, const Tensor& w_gate_up, Tensor& out, Tensor& scratch) {
  TF_CHECK(x.shape.size() == 2 && w_gate_up.shape.size() == 2 && out.shape.size() == 2 &&
               w_gate_up.shape[1] == x.shape[1] && w_gate_up.shape[0] == 2 * out.shape[1] &&
               out.shape[0] == x.shape[0] && scratch.shape == std::vector<int64_t>({x.shape[0], w_gate_up.shape[0]}),
           "linear_gate_up_silu: x " << shape_str(x.shape) << " . W " << shape_str(w_gate_up.shape) << "^T into out "
                                     << shape_str(out.shape) << " (scratch " << shape_str(scratch.shape)
                                     << ") do not match (expected [n, in], [2 inter, in], [n, inter], [n, 2 inter])");
  same_place("linear_gate_up_silu", x, {&w_gate_up, &out, &scratch}, x.dtype);
  if (x.device == Device::CUDA && cuda_body::linear_gate_up_silu(x, w_gate_up, out)) return;
  linear(x, w_gate_up, scratch);
  silu_mul_halves(scratch, out);
}

void linear_silu_mul_halves(const Tensor& gate_up, const Tensor& weight, Tensor& y, Tensor& scratch) {
  TF_CHECK(gate_up.shape.size() == 2 && weight.shape.size() == 2 && gate_up.shape[1] == 2 * weight.shape[1],
           "linear_silu_mul_halves: gate_up " << shape_str(gate_up.shape) << " does not match W "
                                              << shape_str(weight.shape) << " (expected [n, 2 * inter], [out, inter])");
  if (gate_up.device == Device::CUDA && cuda_body::linear_silu_mul_halves(gate_up, weight, y)) return;
  silu_mul_halves(gate_up, scratch);
  linear(scratch, weight, y);
}

bool norm_linear(const Tensor& residual, const Tensor* add, Tensor* sum_out, const Tensor& norm_weight,
                 const RmsNormParams& np, const Tensor& weight, Tensor& y) {
  if (residual.device != Device::CUDA) return false;  // the CPU runs the two ops
  return cuda_body::norm_linear(residual, add, sum_out, norm_weight, np, weight, y);
}

bool norm_linear_gate_up_silu(const Tensor& residual, const Tensor* add, Tensor* sum_out, const Tensor& norm_weight,
                              const RmsNormParams& np, const Tensor& w_gate_up, Tensor& out) {
  if (residual.device != Device::CUDA) return false;  // the CPU runs the three ops
  return cuda_body::norm_linear_gate_up_silu(residual, add, sum_out, norm_weight, np, w_gate_up, out);
}

bool norm_linear_rope_qkv_to_cache(const Tensor& residual, const Tensor* add, Tensor* sum_out,
                                   const Tensor& norm_weight, const RmsNormParams& np, const Tensor& w_qkv,
                                   const Tensor& cos, const Tensor& sin, const Tensor& rows, const Tensor& slots,
                                   Tensor& q_out, Tensor& k_cache, Tensor& v_cache) {
  if (residual.device != Device::CUDA) return false;
  TF_CHECK(q_out.shape.size() == 3 && k_cache.shape.size() == 3 && w_qkv.shape.size() == 2 &&
               w_qkv.shape[0] == (q_out.shape[1] + 2 * k_cache.shape[0]) * q_out.shape[2] &&
               q_out.shape[0] == residual.shape[0],
           "norm_linear_rope_qkv_to_cache: W " << shape_str(w_qkv.shape) << ", q_out " << shape_str(q_out.shape)
                                               << " and cache layer " << shape_str(k_cache.shape)
                                               << " do not match (expected [(heads + 2 kv_heads) hd, in], [n, heads, hd], "
                                                  "[kv_heads, capacity, hd])");
  return cuda_body::norm_linear_rope_qkv_to_cache(residual, add, sum_out, norm_weight, np, w_qkv, cos, sin, rows,
                                                  slots, q_out, k_cache, v_cache);
}

void silu_mul_halves(const Tensor& gate_up, Tensor& out) {
  TF_CHECK(gate_up.shape.size() == 2 && out.shape.size() == 2 && gate_up.shape[0] == out.shape[0] &&
               gate_up.shape[1] == 2 * out.shape[1],
           "silu_mul_halves: gate_up " << shape_str(gate_up.shape) << " and out " << shape_str(out.shape)
                                       << " do not match (expected [n, 2 * inter] and [n, inter])");
  same_place("silu_mul_halves", gate_up, {&out}, gate_up.dtype);
  if (gate_up.device == Device::CUDA) return cuda_body::silu_mul_halves(gate_up, out);
  TF_CHECK(gate_up.dtype == DType::F32, "silu_mul_halves: CPU tensors must be f32, got " << dtype_name(gate_up.dtype));
  const int64_t n = out.shape[0], I = out.shape[1];
  for (int64_t i = 0; i < n; ++i) {
    const float* g = gate_up.ptr<float>() + i * 2 * I;
    const float* u = g + I;
    float* o = out.ptr<float>() + i * I;
    for (int64_t j = 0; j < I; ++j) {
      const float a = g[j];
      o[j] = (a / (1.0f + std::exp(-a))) * u[j];
    }
  }
}

}  // namespace tf::ops
