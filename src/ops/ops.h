// Every forward-pass op, declared once on tf::Tensor. Each op checks shapes
// and dtypes (one-line tf::Error on mismatch) and dispatches on the device of
// its tensors: CPU bodies live in ops/cpu/*.cpp (f32), CUDA bodies in
// ops/cuda/*.cpp, which drive the kernels of kernels/ (f16/bf16 storage, fp32
// math). A CPU-only build throws "built without CUDA" for CUDA tensors.
//
// Conventions: activations are row-major, one row per token (f32 on CPU, the
// weights' f16/bf16 on CUDA); linear weights are HF-shaped [out, in]; q/k are
// [n, heads, head_dim] (contiguous). On CUDA, linear may write f32 y (logits).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tf::ops {

// A borrowed view of rows [begin, end) of a tensor (outermost dimension).
Tensor slice_rows(const Tensor& t, int64_t begin, int64_t end);

// ---- embedding: out[i, :] = table[tokens[i], :] ----
// table f32 [vocab, d]; tokens i32 [n]; out f32 [n, d].
void embedding(const Tensor& table, const Tensor& tokens, Tensor& out);

// ---- RMSNorm (HF LlamaRMSNorm): out = w * x / sqrt(mean(x^2) + eps) ----
struct RmsNormParams {
  float eps = 1e-6f;
  // add_rmsnorm only: normalize the sum as stored in residual (rounded to its
  // dtype), bit for bit add_inplace then rmsnorm; false: the unrounded sum.
  // The same on the CPU, where activations are f32.
  bool rounded_sum = false;
};
// x f32 [n, d]; weight f32 [d]; out f32 [n, d] (may alias x).
void rmsnorm(const Tensor& x, const Tensor& weight, Tensor& out, const RmsNormParams& p);
// Fused: residual += x; out = rmsnorm(residual). residual, x, out all [n, d].
void add_rmsnorm(Tensor& residual, const Tensor& x, const Tensor& weight, Tensor& out,
                 const RmsNormParams& p);
// residual += x (elementwise, same shapes).
void add_inplace(Tensor& residual, const Tensor& x);

// dst = src rounded to dst's dtype (src f32; same shape). On the CPU, where
// activations are f32, a copy.
void cast(const Tensor& src, Tensor& dst);

// ---- linear: y[n, out] = x[n, in] . W[out, in]^T (BLAS sgemm on CPU) ----
void linear(const Tensor& x, const Tensor& weight, Tensor& y);

// ---- rotary embedding ----
// cos/sin tables for the given positions, as HF LlamaRotaryEmbedding does in
// fp32: angle = f32(inv_freq[i] * f32(pos)), cos = f32(cos(angle)) * scaling.
// inv_freq f32 [half]; positions i32 [n]; cos, sin f32 [n, half].
struct RopeParams {
  float attention_scaling = 1.0f;
};
void rope_cos_sin(const Tensor& inv_freq, const Tensor& positions, Tensor& cos, Tensor& sin,
                  const RopeParams& p);
// In place on x [n, heads, head_dim] with head_dim == 2*half, HF rotate_half
// convention (pairs are (i, i+half)): x1' = x1*c - x2*s, x2' = x2*c + x1*s.
void rope_apply(Tensor& x, const Tensor& cos, const Tensor& sin);

// q [n, heads, hd] and k [n, kv_heads, hd] rotated in place with row rows[i]
// of the cos/sin tables (f32 [table_rows, half]); one launch on CUDA.
void rope_apply_rows(Tensor& q, Tensor& k, const Tensor& cos_table, const Tensor& sin_table, const Tensor& rows);

// One step's q, k and v rows as one GEMM or three wrote them: q [n, heads,
// hd], k and v [n, kv_heads, hd] (shapes, dtype, device and the first row's
// address), token rows *_ld elements apart. Not a Tensor of its own: the rows
// of a stacked q/k/v output are not contiguous.
struct QKVRows {
  Tensor q, k, v;
  int64_t q_ld = 0, k_ld = 0, v_ld = 0;
};
// Three contiguous tensors.
QKVRows qkv_rows(const Tensor& q, const Tensor& k, const Tensor& v);
// The q | k | v columns of one stacked GEMM output qkv [n, (heads + 2 kv_heads) * hd].
QKVRows qkv_rows(const Tensor& qkv, int64_t heads, int64_t kv_heads, int64_t head_dim);
// RoPE of q and k (as rope_apply_rows: token i uses row rows[i] of the f32
// [table_rows, hd / 2] tables) with k and v moved in the same pass (one launch on CUDA):
// rope_qkv_split: q_out = rope(q), k_out = rope(k), v_out = v, contiguous
//   [n, heads or kv_heads, hd] (the unfused path after a stacked GEMM).
// rope_qkv_to_cache: q_out = rope(q); rope(k) and v of token i go to slot
//   slots[i] (i32 [n]) of one cache layer k_cache, v_cache [kv_heads, capacity, hd].
// q_out may be in.q itself when that is contiguous.
void rope_qkv_split(const QKVRows& in, const Tensor& cos_table, const Tensor& sin_table, const Tensor& rows,
                    Tensor& q_out, Tensor& k_out, Tensor& v_out);
void rope_qkv_to_cache(const QKVRows& in, const Tensor& cos_table, const Tensor& sin_table, const Tensor& rows,
                       const Tensor& slots, Tensor& q_out, Tensor& k_cache, Tensor& v_cache);
// rope_qkv_to_cache of the stacked q/k/v GEMM x . W_qkv^T (W_qkv [(heads +
// 2 kv_heads) hd, in], heads from q_out, kv_heads from the cache). On CUDA
// with <= 32 rows, hd / 2 a multiple of 8 and a tensor-core skinny variant one
// kernel (the RoPE and the cache write in the GEMM's epilogue), bit-identical
// to the two ops; elsewhere those two ops, with `scratch` [n, (heads + 2
// kv_heads) hd] holding the GEMM's output (untouched by the one kernel).
void linear_rope_qkv_to_cache(const Tensor& x, const Tensor& w_qkv, const Tensor& cos_table, const Tensor& sin_table,
                              const Tensor& rows, const Tensor& slots, Tensor& q_out, Tensor& k_cache,
                              Tensor& v_cache, Tensor& scratch);

// ---- SwiGLU: out = silu(gate) * up; all [n, inter]; out may alias gate ----
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
// The same from a stacked gate/up GEMM output gate_up [n, 2 * inter] (gate
// the first half of each row, up the second) into out [n, inter].
void silu_mul_halves(const Tensor& gate_up, Tensor& out);
// y = silu_mul_halves(gate_up) . W^T (the down projection of a stacked
// gate/up step). On CUDA with <= 32 rows and a tensor-core skinny variant one
// kernel computes the SwiGLU in the GEMM's input load, bit-identical to the
// two ops; elsewhere it is those two ops, with `scratch` [n, inter] holding
// the SwiGLU. y [n, out] in gate_up's dtype or f32.
void linear_silu_mul_halves(const Tensor& gate_up, const Tensor& weight, Tensor& y, Tensor& scratch);
// out = silu_mul_halves(x . W_gate_up^T) (W_gate_up [2 inter, in], the gate
// rows then the up rows; out [n, inter]). On CUDA with <= 32 rows, inter a
// multiple of 8 and a tensor-core skinny variant one kernel (the SwiGLU in the
// GEMM's epilogue), bit-identical to the two ops; elsewhere those two ops,
// with `scratch` [n, 2 inter] holding the GEMM's output (untouched by the one kernel).
void linear_gate_up_silu(const Tensor& x, const Tensor& w_gate_up, Tensor& out, Tensor& scratch);

// ---- an RMSNorm folded into the linear after it (CUDA steps) ----
// y = rmsnorm(s) . W^T with s = residual (+ add, when given), and sum_out =
// s stored (rounded to the dtype) when given: add_rmsnorm (or rmsnorm) and
// then linear, in one launch, bit for bit those two (np.rounded_sum as in
// add_rmsnorm). sum_out must be neither residual nor add: the caller keeps two
// residual buffers and alternates them. CUDA only, for <= 32 rows of <= 2048
// (a multiple of 8) with a tensor-core skinny variant; false where it cannot
// (nothing done: the caller runs the two ops).
bool norm_linear(const Tensor& residual, const Tensor* add, Tensor* sum_out, const Tensor& norm_weight,
                 const RmsNormParams& np, const Tensor& weight, Tensor& y);
// norm_linear with the fused epilogues above, one launch each, bit for bit
// norm_linear followed by the op it replaces: out = silu_mul_halves(rmsnorm(s)
// . W_gate_up^T) (out [n, inter]), and rope_qkv_to_cache of rmsnorm(s) .
// W_qkv^T (q_out and the cache layer as linear_rope_qkv_to_cache). Same
// conditions as norm_linear plus the epilogue's (inter a multiple of 8; head_dim
// a multiple of 16); false where they cannot (nothing done: the caller runs
// norm_linear and the op).
bool norm_linear_gate_up_silu(const Tensor& residual, const Tensor* add, Tensor* sum_out, const Tensor& norm_weight,
                              const RmsNormParams& np, const Tensor& w_gate_up, Tensor& out);
bool norm_linear_rope_qkv_to_cache(const Tensor& residual, const Tensor* add, Tensor* sum_out,
                                   const Tensor& norm_weight, const RmsNormParams& np, const Tensor& w_qkv,
                                   const Tensor& cos_table, const Tensor& sin_table, const Tensor& rows,
                                   const Tensor& slots, Tensor& q_out, Tensor& k_cache, Tensor& v_cache);

// ---- attention over a KV view ----
// What a cache hands attention for one layer: K and V for kv head h, slot j
// live at k + h*head_stride + j*token_stride (same for v). positions[j] is
// the position of slot j; nullptr means position == slot index.
struct KVView {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t length = 0;        // valid slots [0, length)
  int64_t head_stride = 0;   // elements between kv heads (capacity * head_dim)
  int64_t token_stride = 0;  // elements between slots (head_dim)
  const int32_t* positions = nullptr;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  Device device = Device::CPU;
  // A CUDA view (device == CUDA): k/v above stay null; these point at one
  // layer's [kv_heads, capacity, head_dim] in `dtype`, and dev_length at a
  // device copy of `length` (so a captured launch can read it).
  const void* dev_k = nullptr;
  const void* dev_v = nullptr;
  DType dtype = DType::F32;
  const int32_t* dev_length = nullptr;
  int64_t capacity = 0;
};
struct AttentionParams {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;        // 0: 1/sqrt(head_dim)
  int64_t row_block = 64;    // query rows per score block (bounds scratch to row_block * length)
  // CUDA decode (1..32 queries) only. grid_slots > 0 sizes the split grid for
  // that many slots (>= the length) so the launch depends on the length only
  // through the device copy (capturable in a CUDA graph); the result is bit
  // for bit the one sized for the length. workspace: the caller's split scratch
  // of attention_workspace_bytes(n, heads, head_dim, grid_slots) bytes (else a
  // process-wide one that grows).
  int64_t grid_slots = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // CUDA decode: the last split block of each KV head merges the splits (no
  // combine launch; the same bits). StepFusions::fused_combine.
  bool combine_in_split = false;
  // CUDA decode: a call whose grid has one split writes the output from the
  // split kernel, no combine launch (the same bits). StepFusions::direct_single_split.
  bool direct_single_split = true;
  // CUDA decode: the KV is split at multiples of this many slots (a multiple
  // of 64); 0: attention_split_slots(). A model passes the same value to all
  // its decode and verify calls (attention_split_slots_for), so a verified row
  // sees the splits its own decode step saw.
  int64_t split_slots = 0;
};
// Decode attention splits the KV at fixed multiples of this many slots, the
// same for every call of a process (batch invariance: a verified row then sees
// the splits its own decode step saw). 512 unless TRIFORCE_ATTN_SPLIT_SLOTS
// (a multiple of 64) says otherwise, read once: a measurement knob.
int64_t attention_split_slots();
// The split a model with num_kv_heads KV heads (the whole model's, not a
// tensor-parallel shard's, so every TP degree computes the same bits) uses for
// all its steps. TRIFORCE_ATTN_SPLIT_SLOTS=N: N for every model; =auto: by size
// (attention_split_slots_auto); unset: attention_split_slots() (512), until the
// auto rule has been measured against it.
int64_t attention_split_slots_for(int64_t num_kv_heads);
// The size rule: 16 slots per KV head, a power of two times 64, at most 512
// (SmolLM2's 3 KV heads 64, the 68M draft's 12 128, Llama-3-8B's 8 128, a 7B's 32
// 512). A call over L slots then runs about L / 16 split blocks in every model,
// where a fixed 512 gives a 3-head model's 256-slot step one block per head
// walking four tiles in a row.
int64_t attention_split_slots_auto(int64_t num_kv_heads);
// fp32 split scratch of a decode attention call of n queries over `slots` slots,
// split at split_slots (0: attention_split_slots()).
inline size_t attention_workspace_bytes(int64_t n, int64_t heads, int64_t head_dim, int64_t slots,
                                        int64_t split_slots = 0) {
  const int64_t split = split_slots > 0 ? split_slots : attention_split_slots();
  const int64_t splits = slots > 0 ? (slots + split - 1) / split : 1;
  return sizeof(float) * size_t(splits) * size_t(n) * size_t(heads) * size_t(head_dim + 1);
}
// q f32 [n, heads, hd]; q_positions i32 [n]; out f32 [n, heads, hd].
// Causal by position: the query at position p sees slots whose position <= p.
// On CUDA, q_positions holds each query's SLOT instead (device caches store
// tokens in position order and the queries are the newest slots, so "slot <=
// query slot" is the same mask), and ignores kv.positions.
// GQA: query head h reads kv head h / (heads / kv_heads). Softmax in fp32,
// max-subtracted. A query that sees no key gets a zero output row.
void attention(const Tensor& q, const Tensor& q_positions, const KVView& kv, Tensor& out,
               const AttentionParams& p);

// ---- sampling helpers ----
// probs = softmax(logits / temperature) after HF TopPLogitsWarper filtering
// (sort ascending, cumulative softmax, drop tokens whose cumulative
// probability <= 1 - top_p, always keep the most likely min_tokens_to_keep).
// top_p >= 1 disables filtering. logits, probs f32 [n, vocab].
struct SoftmaxParams {
  float temperature = 1.0f;  // must be > 0
  float top_p = 1.0f;
  int64_t min_tokens_to_keep = 1;
};
void softmax_top_p(const Tensor& logits, Tensor& probs, const SoftmaxParams& p);
// The greedy pick of each row, tf::argmax_lowest's rule (gen/sampling.h): 0
// when the row's entry 0 is NaN, else the lowest index among the maxima of its
// non-NaN entries (compared with ==). x f32 [n, vocab]; out i32 [n] on x's device.
// With `ids` (a draft's reduced vocabulary, model/draft_vocab.h), x's column j
// holds token ids.ids[j] of a full_vocab-token row that is -inf elsewhere, and
// out is the rule applied to those full rows, which are never built.
struct ArgmaxIds {
  Tensor ids;                 // i32 [vocab of x], strictly increasing, on x's device
  int64_t full_vocab = 0;
  int64_t first_missing = 0;  // the lowest token of [0, full_vocab) not in ids (full_vocab: none)
};
// ArgmaxIds for `ids` on `dev` (an upload on CUDA; first_missing computed here).
ArgmaxIds argmax_ids(const std::vector<int32_t>& ids, int64_t full_vocab, Device dev);
void argmax(const Tensor& x, Tensor& out, const ArgmaxIds* ids = nullptr);

// ---- sampling at T > 0 on the device (kernels/speculative_sampling.cuh has
// the rules; CUDA tensors only: on the host, gen/sampling.h and
// speculative/verify.h are the same rules) ----
// out[r] <- the draw from row r of probs with number counter + r of the
// Philox stream `seed` (tf::draw_from's rule). probs f32 [n, vocab]; out i32 [n].
void draw_rows(const Tensor& probs, Tensor& out, uint64_t seed, uint64_t counter);
// One level's verification of proposals x (speculative::verify's rule, T >
// 0): q f32 [>= g, vocab] the proposals' rows, p f32 [>= g + 1, vocab] the
// verifier's; out i32 [3] <- accepted k, the token emitted after them, 1 if
// it was drawn after a rejection. residual false: the reference's middle-level
// bug (tests). Uniform i is number counter + i; the final draw is number
// counter + (k + 1 after a rejection, g after none).
void verify_rows(const Tensor& q, const Tensor& p, const std::vector<int32_t>& x, uint64_t seed, uint64_t counter,
                 bool residual, Tensor& out);
// out[r, ids[j]] <- in[r, j], `fill` elsewhere: a reduced vocabulary's rows
// made full (model/draft_vocab.h). in f32 [n, k]; ids i32 [k]; out f32 [n, vocab].
void expand_columns(const Tensor& in, const Tensor& ids, float fill, Tensor& out);

// ---- launch overlap in a decode step (programmatic dependent launch) ----
// While a StepLaunchOverlap made with on = true lives, the CUDA step kernels
// this thread launches may start while their predecessor drains (their
// launch, ramp and weight prefetch overlap it; kernels/pdl.cuh has the rule
// each kernel keeps, so the bits never change). The caller calls
// step_launch_break() after anything else it enqueues inside (a copy, an NCCL
// collective), so the kernel after it launches normally. A no-op on the CPU.
class StepLaunchOverlap {
 public:
  explicit StepLaunchOverlap(bool on);
  ~StepLaunchOverlap();
  StepLaunchOverlap(const StepLaunchOverlap&) = delete;
  StepLaunchOverlap& operator=(const StepLaunchOverlap&) = delete;
};
void step_launch_break();
// A step's staged inputs, pinned host -> device, as one kernel instead of
// copies (kernels/step_inputs.cuh says why): ints (n_ints i32) and rows
// (n_rows f32) from the pinned buffers, ints[0] from the device `token` when
// set. Opens the overlap chain like any step kernel. CUDA builds only.
struct StepInputs {
  const int32_t* ints_host = nullptr;
  void* ints = nullptr;
  int64_t n_ints = 0;
  const float* rows_host = nullptr;
  void* rows = nullptr;
  int64_t n_rows = 0;
  const int32_t* token = nullptr;
};
void stage_step_inputs(const StepInputs& in);
// stage_step_inputs calls of the process, counted at launch, not at graph replay.
int64_t step_inputs_launches();
// Kernel launches of the process that carried the overlap attribute.
int64_t step_overlapped_launches();
// Decode attention calls of the process whose one split wrote the rows itself
// (AttentionParams::direct_single_split), counted at launch, not at graph replay.
int64_t attention_direct_launches();

}  // namespace tf::ops
