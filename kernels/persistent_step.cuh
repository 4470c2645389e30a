// One whole model step (n = 1..kPersistentMaxTokens tokens) of a small model
// in one launch: every layer, the final norm and the lm_head, with a grid-wide
// barrier between dependent phases instead of a kernel boundary. A small
// model's step is bound by the count of dependent launches (~10 a layer, each
// 3-6 us although it moves kilobytes), not by its bytes.
//
// Exactness: every phase runs the tile functions of the per-op kernels
// (gemm_skinny_tile.cuh, rmsnorm_tile.cuh, rope_tile.cuh,
// attention_decode_tile.cuh, activation_tile.cuh) over the same tile indices
// the standalone grids use, with the same roundings between ops, so a row's
// logits and K/V are the per-op path's bits (and stay batch-invariant). Phases
// of a layer (a barrier after each):
//   qkv   every block with a tile recomputes the n normalized rows (the
//         previous layer's closing add + this layer's norm, or the embedding
//         + norm) into shared memory, then its stacked q/k/v GEMV tiles
//   rope  q rotated, k rotated and v copied into the cache at the query slots
//   attn  split-KV attention tiles (4 warps of a block)
//   comb  the LSE combine, a row per block
//   o     o-proj GEMV tiles
//   gu    prologue: residual add + MLP norm into shared memory; gate/up tiles
//   down  prologue: SiLU(gate) * up of the n rows into shared memory; down tiles
// then the final add + norm prologue and the lm_head tiles (f32 logits).
// Fused attention (the default, persistent_step_fused_attention()): rope and
// comb disappear as phases. Each attention task first writes the step's K/V
// rows that fall in its own split (no other task reads them), rotates its q
// rows straight into the split tile's shared q tile, and the last task of each
// KV head to finish (an atomic counter) combines that head's rows: 5 barriers
// a layer instead of 7.
// The residual stream alternates between two buffers so that one block can
// store the new residual while every block still reads the old one.
//
// The grid is cooperative (co-resident blocks, sized by the occupancy API) and
// capturable in a CUDA graph; the barrier counts arrivals over the launch
// (grid_barrier in persistent_step.cu has the two designs measured). A barrier
// that does not complete in ~10 s traps (the launch then fails) instead of
// hanging.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "rope.cuh"

namespace tf::cuda {

constexpr int kPersistentMaxTokens = 8;      // one mma N tile of the skinny GEMM
constexpr int64_t kPersistentMaxHidden = 2048;  // the norm rows of one block (256 threads x 8)
constexpr int64_t kPersistentMaxInter = 8192;   // the SiLU rows in shared memory

// One layer's weights on the device (the stacked q/k/v and gate/up matrices).
struct PersistentLayer {
  const void* attn_norm = nullptr;  // [hidden]
  const void* wqkv = nullptr;       // [(H + 2 KH) D, hidden]
  const void* wo = nullptr;         // [hidden, H D]
  const void* mlp_norm = nullptr;   // [hidden]
  const void* w_gate_up = nullptr;  // [2 I, hidden]
  const void* w_down = nullptr;     // [hidden, I]
};

struct PersistentStepParams {
  const PersistentLayer* layers = nullptr;  // device [num_layers]
  int num_layers = 0;
  const void* embed = nullptr;       // [vocab, hidden]
  const void* final_norm = nullptr;  // [hidden]
  const void* lm_head = nullptr;     // [vocab_rows, hidden]
  int64_t hidden = 0, inter = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab_rows = 0;
  float eps = 1e-6f;
  int n = 0;         // tokens, 1..kPersistentMaxTokens
  int out_from = 0;  // logits for rows [out_from, n); n: none
  const int32_t* tokens = nullptr;  // device [n]
  // RoPE + KV write as the per-op step runs it (q, k, v, lds, q_out, cos/sin,
  // rows, slots, strides, slot_limit); k_out / v_out are layer 0's and move by
  // kv_layer_stride elements a layer.
  RopeQkvParams rope;
  int64_t kv_layer_stride = 0;
  int64_t capacity = 0;                  // slots per kv head
  const int32_t* kv_length = nullptr;    // device scalar (the length after the step's slots)
  int64_t split_slots = 512;             // attention's fixed split
  int max_splits = 1;                    // the splits the workspace holds (>= those the length needs)
  float attn_scale = 0.0f;               // 0: 1 / sqrt(head_dim)
  // scratch
  void* x[2] = {nullptr, nullptr};  // residual stream [n, hidden], alternating
  void* qkv = nullptr;              // [n, (H + 2 KH) D]
  void* q = nullptr;                // [n, H, D] rotated
  void* att = nullptr;              // [n, H D]
  void* proj = nullptr;             // [n, hidden]
  void* gu = nullptr;               // [n, 2 I]
  float* workspace = nullptr;       // >= persistent_step_workspace_bytes(...)
  size_t workspace_bytes = 0;
  float* logits = nullptr;          // [n - out_from, vocab_rows] f32
  // Non-null: the kernel stops at the final norm, writing rows [out_from, n) of
  // it here ([n - out_from, hidden]), and the caller runs the lm_head.
  void* xn_out = nullptr;
  unsigned* barrier = nullptr;      // 2 words (the launcher zeroes the arrival count before each launch)
  unsigned* counters = nullptr;     // kv_heads words, the same (fused attention's arrivals)
  bool fused_attention = true;
  // One attention split (a cache of at most split_slots): the split writes att
  // itself, with no partials and no combine (StepFusions::direct_single_split).
  bool direct_single_split = true;
  bool kv_prefetch = true;          // set by the launcher from TRIFORCE_PERSISTENT_KV_PREFETCH
  int barrier_kind = 0;             // set by the launcher from TRIFORCE_PERSISTENT_BARRIER
  unsigned long long* stamps = nullptr;  // profile: (clock, phase) pairs of block 0, or nullptr
  int stamps_cap = 0;
  DType dtype = DType::BF16;
};

// Why the persistent step cannot run these shapes (nullptr: it can). Checks
// hidden, head_dim, GQA, intermediate and the skinny GEMM variant in force.
const char* persistent_step_unsupported(int64_t hidden, int64_t inter, int64_t heads, int64_t kv_heads,
                                        int64_t head_dim, DType dtype);
size_t persistent_step_workspace_bytes(int64_t n, int64_t heads, int64_t head_dim, int max_splits);
// Validates p, then one cooperative launch on `stream`.
void persistent_step(const PersistentStepParams& p, cudaStream_t stream = nullptr);
// Blocks of the last launch's grid (for the benchmark's counters).
int persistent_step_last_grid();
// The process-wide choice of the fused attention phase: TRIFORCE_PERSISTENT_FUSED_ATTN
// (0 or 1, default 1), read once; the setter is for tests (models made after it).
bool persistent_step_fused_attention();
void set_persistent_step_fused_attention(bool on);
// Whether the lm_head runs inside the kernel (TRIFORCE_PERSISTENT_LM_HEAD, 0 or 1,
// default 1) or as the standalone skinny GEMM after it (all the SMs' blocks:
// more loads in flight for the largest matrix, for one more launch).
bool persistent_step_lm_head();
void set_persistent_step_lm_head(bool on);
// Whether each block copies its tiles' weights for the next GEMV phase into
// shared memory while the grid runs the current one (TRIFORCE_PERSISTENT_STAGE_WEIGHTS,
// 0 or 1, default 0: measured slower, results/h100/session-2026-12-07b), instead
// of loading them from L2 after the barrier.
bool persistent_step_stage_weights();
void set_persistent_step_stage_weights(bool on);

// Benchmarks only. With profiling on, every launch stamps block 0's clock after
// each phase; persistent_step_profile() waits for the device and returns the
// last launch's microseconds per phase kind, summed over layers, as
// {"qkv", "rope", "attn", "comb", "o", "gu", "down", "lm_head"} (0 where a
// phase did not run), plus "total" (first to last stamp).
void set_persistent_step_profiling(bool on);
struct PersistentPhaseTimes {
  const char* name;
  double us;
};
std::vector<PersistentPhaseTimes> persistent_step_profile();
// Microseconds per grid barrier of a cooperative grid of blocks_per_sm blocks
// per SM doing nothing but `iters` barriers (the floor of a phase), with the
// arrival-counter barrier of the step, or the first (generation) design.
double persistent_barrier_us(int iters, int blocks_per_sm, bool generation = false);

}  // namespace tf::cuda
