// LlamaModel: one flat forward for both backends. Its device and dtype are
// the weights': host f32 weights give the fp32 CPU reference every kernel and
// engine is checked against (matches HF LlamaForCausalLM, eager, fp32);
// CUDA f16/bf16 weights run the same op sequence on the kernels of kernels/.
// Scratch is preallocated (sized by the chunk length); long calls run in
// chunks of at most max_chunk tokens so memory stays bounded. Logits always
// come back as host f32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "parallel/comm.h"
#include "kv/full_cache.h"
#include "model/config.h"
#include "model/prefill_options.h"
#include "model/rope.h"
#include "model/step_fusions.h"
#include "model/step_graphs.h"
#include "model/weights.h"

namespace tf {

class LlamaModel {
 public:
  // Sharded weights (w.shard.size > 1) need a communicator of that size: the
  // rank computes its heads and intermediate slice, and the row-parallel o and
  // down projections are summed over ranks. comm is not owned.
  LlamaModel(ModelConfig cfg, LlamaWeights w, int64_t max_chunk = 512, parallel::Communicator* comm = nullptr);

  const ModelConfig& config() const { return cfg_; }
  const LlamaWeights& weights() const { return w_; }
  int64_t max_chunk() const { return max_chunk_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }

  parallel::Communicator* communicator() const { return comm_; }
  // CUDA graphs for decode-sized calls (n <= kGraphMaxTokens) on CUDA: each
  // step shape is captured once and replayed (model/step_graphs.h); results
  // are bit-identical to eager. Defaults to cuda_graphs_default() (on).
  // Offloaded caches always run eagerly.
  void set_cuda_graphs(bool on);
  bool cuda_graphs() const { return graphs_on_; }
  const StepGraphs& step_graphs() const { return graphs_; }
  static constexpr int64_t kGraphMaxTokens = 32;  // the skinny GEMM / decode attention bound
  // Which launches a CUDA step merges (model/step_fusions.h); each is
  // bit-identical to the unfused ops. Defaults to step_fusions_for(hidden_size).
  void set_step_fusions(const StepFusions& f);
  const StepFusions& step_fusions() const { return fusions_; }
  // How prefill-shaped CUDA chunks run (model/prefill_options.h); defaults to
  // prefill_options_default(). Steps of <= kGraphMaxTokens never read it.
  void set_prefill_options(const PrefillOptions& o) { prefill_ = o; }
  const PrefillOptions& prefill_options() const { return prefill_; }
  // The persistent whole-step kernel (StepFusions::persistent_step,
  // model/persistent_step.cpp): empty when this model can take it (shapes,
  // dtype, one rank), else why not; and how many steps it ran.
  const std::string& persistent_step_unsupported() const { return pstep_unsupported_; }
  int64_t persistent_steps() const { return persistent_steps_; }
  // Forward chunks recorded with the norm-prologue GEMMs (StepFusions::fused_norm_gemm):
  // each eager run or graph capture counts once (a replay runs no host code).
  int64_t norm_gemm_chunks() const { return norm_gemm_chunks_; }
  // Of those, the chunks whose norm-prologue GEMMs ran a fused epilogue too
  // (RoPE + the KV write, or the SwiGLU: one launch for the three ops).
  int64_t norm_epilogue_chunks() const { return norm_epilogue_chunks_; }
  // The step graphs' counts (model/step_graphs.h): steps recorded, replayed,
  // and run eagerly on the graph path (a key's first use). A run whose steps
  // were mostly not replays pays capture costs that the step benchmarks,
  // which replay, never see.
  int64_t graph_captures() const { return graphs_.captures(); }
  int64_t graph_replays() const { return graphs_.replays(); }
  int64_t graph_eager_runs() const { return graphs_.eager_runs(); }
  // The decode attention split of this model's steps (ops::attention_split_slots_for).
  int64_t attention_split_slots() const { return attn_split_; }
  static constexpr int64_t kPersistentMaxTokens = 8;  // = cuda::kPersistentMaxTokens
  // A cache shaped for this model (this rank's KV heads); offloaded when
  // set_kv_offload enabled it (the target's full caches: prefill snapshot,
  // top level, ar). Retrieval and draft caches are built directly, on the device.
  FullKVCache make_cache(int64_t capacity) const;
  void set_kv_offload(const KVOffloadOptions& o) { offload_ = o; }
  const KVOffloadOptions& kv_offload() const { return offload_; }

  // Forward n new tokens at explicit positions, appending their K/V at slots
  // cache.length() .. cache.length()+n-1. Attention is causal by position (a
  // token at position p sees cached tokens with position <= p). Returns f32
  // logits [n_out, vocab] for the last n_out tokens (n_out = -1: all n).
  // On error the cache is rolled back to its length at entry.
  Tensor forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                 FullKVCache& cache, int64_t n_out = -1);
  // Positions cache.length() + i.
  Tensor forward(const std::vector<int32_t>& tokens, FullKVCache& cache, int64_t n_out = -1);
  // The T = 0 decision: ids[i] = argmax_lowest (gen/sampling.h) of row i of
  // the logits forward(tokens, positions, cache, n_out) returns, the same id
  // bit for bit (ops::argmax's rule; a reduced vocabulary's row as expanded).
  // Only where greedy_on_device(): the argmax runs on the device after the
  // lm_head, inside the step's graph, and the n_out int32 ids are the one
  // copy back (no logits row leaves the device). Elsewhere the caller takes
  // forward() and scans its rows (speculative::Verifier::greedy_ids).
  void forward_greedy(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions, FullKVCache& cache,
                      int64_t n_out, std::vector<int32_t>& ids);
  // Positions cache.length() + i.
  void forward_greedy(const std::vector<int32_t>& tokens, FullKVCache& cache, int64_t n_out,
                      std::vector<int32_t>& ids);
  // k greedy steps with one host wait (a drafter's T = 0 proposal): step 0
  // forwards tokens at positions and takes the argmax of its last row,
  // ids[0]; step i (1..k-1) forwards ids[i - 1] at positions.back() + i and
  // takes ids[i]. The same ids and K/V, bit for bit, as those k forward_greedy
  // calls: the steps are the same graphs' bodies, but step i reads its token
  // from step i-1's argmax on the device, the host stages every step ahead of
  // the GPU, and it waits once, for the k ids. Where greedy_chain_applies;
  // elsewhere it makes the k forward_greedy calls (so greedy_on_device() still).
  void forward_greedy_chain(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                            FullKVCache& cache, int64_t k, std::vector<int32_t>& ids);
  // CUDA graphs on, the argmax on the device, one rank, a device cache, no
  // persistent step, n <= kGraphMaxTokens, k <= kGreedyChainMax, and
  // TRIFORCE_GREEDY_CHAIN not 0 (read at each call; on by default).
  bool greedy_chain_applies(const FullKVCache& cache, int64_t n, int64_t k) const;
  static bool greedy_chain_enabled();
  static constexpr int64_t kGreedyChainMax = 16;
  // forward_greedy_chain calls that took the chained path.
  int64_t greedy_chains() const { return greedy_chains_; }
  // A CUDA model whose lm_head is the whole vocabulary on this rank (or a
  // draft's reduced one): forward() then needs no collective past the layers,
  // so forward_greedy's forward is the same call on every rank. A
  // vocab-parallel shard all-gathers its logits; it keeps forward().
  // TRIFORCE_DEVICE_ARGMAX=0 sends every caller back to forward() and the host
  // scan (read at each call: the A/B of the device path, and the tests' reference).
  bool greedy_on_device() const { return greedy_on_device_ && device_argmax_enabled(); }
  static bool device_argmax_enabled();
  // forward_greedy calls of this model, and of every model of this process
  // (tests check that a greedy run really took the device path).
  int64_t greedy_forwards() const { return greedy_forwards_; }
  static int64_t process_greedy_forwards();
  // The T > 0 form of forward_greedy, on the same models: rows (the caller's
  // CUDA f32 [n_out, config().vocab_size]) <- the sampling distribution
  // (ops::softmax_top_p with sp) of each of the last n_out logits rows that
  // forward(tokens, positions, cache, n_out) computes, a reduced vocabulary's
  // rows made full (zero outside its ids). Nothing is copied back and nothing
  // waits: the rows are on the stream for ops::draw_rows / ops::verify_rows.
  // The lm_head rows come from the same step (graph) as forward()'s; the
  // softmax runs after it, outside the graph (temperature and top-p are not
  // part of a step's key). Where sampling_on_device() only.
  void forward_distributions(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                             FullKVCache& cache, int64_t n_out, const ops::SoftmaxParams& sp, Tensor& rows);
  // Positions cache.length() + i.
  void forward_distributions(const std::vector<int32_t>& tokens, FullKVCache& cache, int64_t n_out,
                             const ops::SoftmaxParams& sp, Tensor& rows);
  // greedy_on_device()'s models, unless TRIFORCE_DEVICE_SAMPLING=0 (read at
  // each call); otherwise every T > 0 caller takes forward() and the host rules.
  bool sampling_on_device() const { return greedy_on_device_ && device_sampling_enabled(); }
  static bool device_sampling_enabled();
  // forward_distributions calls of this model, and of every model of this process.
  int64_t sampled_forwards() const { return sampled_forwards_; }
  static int64_t process_sampled_forwards();
  // forward() that also hands back the post-RoPE query of the call's last token
  // per layer ([layers][heads * head_dim]): what the retrieval cache scores its
  // chunks against, taken from the one forward that computes it anyway.
  Tensor forward_capturing_last_query(const std::vector<int32_t>& tokens, FullKVCache& cache, int64_t n_out,
                                      std::vector<std::vector<float>>& last_query);

  // Tokens forwarded by this model, and by every model of this process: the
  // tensor-parallel runs report them per rank, which shows where a draft ran.
  int64_t forwarded_tokens() const { return forwarded_; }
  static int64_t process_forwarded_tokens();

 private:
  // What a graph-captured chunk does differently: attention over a grid for
  // grid_slots with the model's own workspace, and copies that do not wait.
  struct GraphLaunch {
    int64_t grid_slots = 0;
  };
  // Where a chunk's output rows [out_from, n) go: host f32 logits rows
  // [., lm_head rows], or (CUDA) one argmax id per row, taken on the device;
  // neither: the chunk has no output.
  struct RowsOut {
    float* logits = nullptr;
    int32_t* ids = nullptr;
    bool device = false;  // CUDA: the lm_head rows stay in dlogits_ (forward_distributions)
    explicit operator bool() const { return logits || ids || device; }
  };
  // forward()'s checks; returns n_out resolved (-1: all tokens).
  int64_t check_forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                        const FullKVCache& cache, int64_t n_out) const;
  // The chunks of a checked call; rows of the last n_out tokens to `out`.
  void run_forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions, FullKVCache& cache,
                   int64_t n_out, RowsOut out);
  // CUDA: the lm_head rows [r0, r0 + m) of the chunk are in dlogits_; their ids to dids_[r0 ..].
  void argmax_rows(int64_t r0, int64_t m);
  // Host half of a chunk: the rope rows (on the host, as transformers computes
  // them), the slot claim, and the inputs staged for the device. Returns the first slot.
  int64_t stage_chunk(const int32_t* tokens, const int32_t* positions, int64_t n, FullKVCache& cache,
                      const RopeTable& rope);
  // A staged chunk, eagerly or as a CUDA graph step.
  void run_step(int64_t n, int64_t slot, FullKVCache& cache, int64_t out_from, RowsOut out, bool capture_last_row);
  // Device half: every launch of the chunk (what a graph captures). With g,
  // the rows go to `out` without waiting (pinned memory, read after a sync).
  void run_chunk(int64_t n, int64_t slot, FullKVCache& cache, int64_t out_from, RowsOut out, bool capture_last_row,
                 const GraphLaunch* g);
  // The persistent step (model/persistent_step.cpp): whether this chunk takes
  // it, and the chunk as one launch (inputs already uploaded).
  bool persistent_applies(int64_t n, const FullKVCache& cache) const;
  void run_persistent(int64_t n, FullKVCache& cache, int64_t out_from, RowsOut out, const GraphLaunch* g);

  std::vector<std::vector<float>>* capture_q_ = nullptr;  // set only inside forward_capturing_last_query
  Tensor qcap_;  // CUDA: the captured query rows [layers, heads * head_dim] in dtype_, made on first use
  ModelConfig cfg_;
  LlamaWeights w_;
  parallel::Communicator* comm_ = nullptr;
  int64_t max_chunk_;
  int64_t forwarded_ = 0;
  int64_t greedy_forwards_ = 0;
  int64_t sampled_forwards_ = 0;
  KVOffloadOptions offload_;
  Rope rope_;
  void stage_inputs(int32_t* dst, const int32_t* tokens, const int32_t* positions, int64_t n, int64_t first_slot);
  // The step of forward_greedy_chain being staged and run: -1 none; 0 the
  // first (inputs staged as usual, its argmax to dids_[0], nothing copied
  // back); i >= 1: its token copied on the device from dids_[i - 1], its other
  // inputs from ring row i of chain_ints_host_ / chain_cossin_ (pinned, so
  // staging never waits for the steps still queued), its argmax to dids_[i].
  int chain_step_ = -1;
  Tensor chain_ints_host_, chain_cossin_;  // [kGreedyChainMax, 3] i32, [kGreedyChainMax, head_dim] f32
  int64_t greedy_chains_ = 0;

  Device device_ = Device::CPU;
  DType dtype_ = DType::F32;
  // scratch, [max_chunk, ...], on device_ (activations in dtype_)
  Tensor tok_, pos_, x_, xn_, q_, k_, v_, att_, proj_, gate_, up_;
  Tensor x_alt_;  // CUDA: [32, hidden], the residual's other buffer under StepFusions::fused_norm_gemm
  Tensor proj32_;  // f32 row-parallel partials (tensor parallel on CUDA only)
  // host f32 rope rows for the chunk (the CPU computes them, as transformers
  // does): cos rows [0, n*half), then sin rows, so one copy moves both
  Tensor cossin_, inv_freq_;
  // CUDA only: i32 inputs [tokens | positions | query slots] (n each, one
  // copy), the constant rows 0..C-1, the rope rows, f32 logits rows, and the
  // outputs of the stacked q/k/v and gate/up GEMMs (steps of <= 32 tokens)
  Tensor ints_host_, ints_, rows_, dcossin_, dlogits_, qkv_, gu_;
  // CUDA greedy (forward_greedy): the argmax ids of a chunk's rows [max_chunk]
  // on the device, a graph step's pinned copy of them, and a reduced
  // vocabulary's ids for the argmax (empty for a whole-vocabulary head)
  bool greedy_on_device_ = false;
  // CUDA: passed by the stream once the last chunk's uploads have read the
  // pinned staging (ints_host_, cossin_), which stage_chunk then refills
  StreamMark staging_free_;
  Tensor dids_, ids_host_;
  ops::ArgmaxIds head_argmax_;  // also the reduced vocabulary's ids that forward_distributions expands to
  StepFusions fusions_;
  // CUDA decode attention: the split every step of this model uses
  // (ops::attention_split_slots_for its config's KV heads)
  int64_t attn_split_ = 512;
  // CUDA prefill: the options, and the stacked GEMMs' [max_chunk, ...] outputs (made on first use)
  PrefillOptions prefill_;
  Tensor prefill_qkv_, prefill_gu_;
  // CUDA graphs: on/off, the recorded steps, pinned logits rows of a graph
  // step, and the attention split scratch the graphs point at
  bool graphs_on_ = false;
  StepGraphs graphs_;
  Tensor logits_host_, attn_ws_;
  // persistent step: why not (empty: it can run), the device layer table, the
  // grid barrier's words, the second residual buffer, steps run
  std::string pstep_unsupported_ = "not a CUDA model";
  Tensor pstep_layers_, pstep_barrier_, pstep_x_;
  const void* pstep_layers_for_ = nullptr;
  int64_t persistent_steps_ = 0;
  int64_t norm_gemm_chunks_ = 0;
  int64_t norm_epilogue_chunks_ = 0;
};

// The process-wide default of LlamaModel::cuda_graphs() for models made after
// the call (`--no-cuda-graphs` turns it off before any model exists).
void set_cuda_graphs_default(bool on);
bool cuda_graphs_default();

// Greedy continuation: the n_new tokens argmax-decoded after `prompt`.
std::vector<int32_t> greedy_generate(LlamaModel& model, const std::vector<int32_t>& prompt, int64_t n_new);

}  // namespace tf
