// CUDA bodies of ops/ops.h, called by the dispatching ops when a tensor lives
// on Device::CUDA. Each validates dtypes and shapes, then launches the kernel
// of kernels/ on cuda::compute_stream(). Built without CUDA, each throws.
#pragma once
#include "ops/ops.h"

namespace tf::ops::cuda_body {

void embedding(const Tensor& table, const Tensor& tokens, Tensor& out);
void rmsnorm(const Tensor& x, const Tensor& weight, Tensor& out, const RmsNormParams& p);
void add_rmsnorm(Tensor& residual, const Tensor& x, const Tensor& weight, Tensor& out, const RmsNormParams& p);
void add_inplace(Tensor& residual, const Tensor& x);
void cast(const Tensor& src, Tensor& dst);
void linear(const Tensor& x, const Tensor& weight, Tensor& y);
void rope_apply_at(Tensor& q, Tensor* k, const Tensor& cos, const Tensor& sin, const Tensor& rows);
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void silu_mul_halves(const Tensor& gate_up, Tensor& out);
// The one-kernel down projection of linear_silu_mul_halves; false (nothing
// launched) where the skinny GEMM cannot take it.
bool linear_silu_mul_halves(const Tensor& gate_up, const Tensor& weight, Tensor& y);
// ops::norm_linear's one launch; false (nothing launched) where the skinny
// GEMM's norm prologue cannot take it.
bool norm_linear(const Tensor& residual, const Tensor* add, Tensor* sum_out, const Tensor& norm_weight,
                 const RmsNormParams& np, const Tensor& weight, Tensor& y);
// rope_qkv_split (to_cache false: k_dst, v_dst [n, kv_heads, hd]) and
// rope_qkv_to_cache (true: one cache layer [kv_heads, capacity, hd] at *slots);
// ops_step_cpu.cpp has checked the shapes.
void rope_qkv(const QKVRows& in, const Tensor& cos, const Tensor& sin, const Tensor& rows, const Tensor* slots,
              Tensor& q_out, Tensor& k_dst, Tensor& v_dst, bool to_cache);
// The one-kernel bodies of linear_gate_up_silu and linear_rope_qkv_to_cache;
// false (nothing launched) where the skinny GEMM cannot take them.
bool linear_gate_up_silu(const Tensor& x, const Tensor& w_gate_up, Tensor& out);
bool linear_rope_qkv_to_cache(const Tensor& x, const Tensor& w_qkv, const Tensor& cos, const Tensor& sin,
                              const Tensor& rows, const Tensor& slots, Tensor& q_out, Tensor& k_cache,
                              Tensor& v_cache);
// ops::norm_linear_gate_up_silu's and ops::norm_linear_rope_qkv_to_cache's
// one launch; false (nothing launched) where the norm prologue or the
// epilogue cannot take the shape.
bool norm_linear_gate_up_silu(const Tensor& residual, const Tensor* add, Tensor* sum_out, const Tensor& norm_weight,
                              const RmsNormParams& np, const Tensor& w_gate_up, Tensor& out);
bool norm_linear_rope_qkv_to_cache(const Tensor& residual, const Tensor* add, Tensor* sum_out,
                                   const Tensor& norm_weight, const RmsNormParams& np, const Tensor& w_qkv,
                                   const Tensor& cos, const Tensor& sin, const Tensor& rows, const Tensor& slots,
                                   Tensor& q_out, Tensor& k_cache, Tensor& v_cache);
void attention(const Tensor& q, const Tensor& q_slots, const KVView& kv, Tensor& out, const AttentionParams& p);
void argmax(const Tensor& x, Tensor& out, const ArgmaxIds* ids);
void softmax_top_p(const Tensor& logits, Tensor& probs, const SoftmaxParams& p);
void draw_rows(const Tensor& probs, Tensor& out, uint64_t seed, uint64_t counter);
void verify_rows(const Tensor& q, const Tensor& p, const std::vector<int32_t>& x, uint64_t seed, uint64_t counter,
                 bool residual, Tensor& out);
void expand_columns(const Tensor& in, const Tensor& ids, float fill, Tensor& out);

}  // namespace tf::ops::cuda_body
