#include "model/llama.h"

#include "model/draft_vocab.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/device.h"
#include "model/persistent_step.h"
#include "ops/ops.h"

namespace tf {

namespace {
// Logit rows per lm_head launch on CUDA: bounds the f32 scratch to
// rows * vocab (a 128K-vocab model would need 2 GB for a 4096-token chunk).
constexpr int64_t kLogitRowsPerLaunch = 64;

bool g_cuda_graphs_default = true;

// The attention grid a graph step is recorded for: the splits the length needs,
// rounded up (to a power of two up to 8 splits, then to a multiple of 8), so a
// growing cache is served by a few graphs and a replay launches at most 8
// splits per head that exit at once. Never past the capacity.
int64_t graph_grid_slots(int64_t length, int64_t capacity, int64_t split) {
  const int64_t need = std::max<int64_t>(1, (length + split - 1) / split);
  int64_t splits = 1;
  while (splits < need && splits < 8) splits *= 2;
  if (need > 8) splits = (need + 7) / 8 * 8;
  return std::min(splits * split, capacity);
}
// Host f32 [rows, cols] left uninitialised (Tensor::cpu zero-fills): a step's
// logits rows are all written next, and zeroing them first (1 MB for a 5-row
// verification of a 49K vocabulary) was host time on every step.
Tensor host_f32_unfilled(int64_t rows, int64_t cols) {
  Tensor t;
  t.shape = {rows, cols};
  auto buf = std::shared_ptr<float[]>(new float[size_t(rows * cols)]);
  t.data = buf.get();
  t.owner = std::shared_ptr<void>(buf, buf.get());
  return t;
}
}  // namespace

void set_cuda_graphs_default(bool on) { g_cuda_graphs_default = on; }
bool cuda_graphs_default() { return g_cuda_graphs_default; }

LlamaModel::LlamaModel(ModelConfig cfg, LlamaWeights w, int64_t max_chunk, parallel::Communicator* comm)
    : cfg_(std::move(cfg)), w_(std::move(w)), comm_(comm), max_chunk_(max_chunk), rope_(cfg_) {
  TF_CHECK(max_chunk_ > 0, "LlamaModel: max_chunk must be positive");
  const int64_t comm_size = comm_ ? comm_->size() : 1;
  TF_CHECK(w_.shard.size == comm_size, "LlamaModel: weights are shard " << w_.shard.rank << " of " << w_.shard.size
                                                                       << " but the communicator has " << comm_size
                                                                       << " ranks");
  if (w_.shard.size == 1) {
    w_.local_heads = cfg_.num_heads;
    w_.local_kv_heads = cfg_.num_kv_heads;
    w_.local_intermediate = cfg_.intermediate_size;
  }
  TF_CHECK(int64_t(w_.layers.size()) == cfg_.num_layers,
           "LlamaModel: weights have " << w_.layers.size() << " layers, config " << cfg_.num_layers);
  device_ = w_.embed.device;
  dtype_ = w_.embed.dtype;
  TF_CHECK(device_ == Device::CUDA || dtype_ == DType::F32,
           "LlamaModel: CPU weights must be f32, got " << dtype_name(dtype_));
  TF_CHECK(device_ == Device::CPU || dtype_ == DType::F16 || dtype_ == DType::BF16,
           "LlamaModel: CUDA weights must be f16 or bf16, got " << dtype_name(dtype_));
  const int64_t C = max_chunk_, H = w_.local_heads, KH = w_.local_kv_heads, D = cfg_.head_dim;
  auto act = [&](std::vector<int64_t> shape) { return empty_tensor(device_, dtype_, std::move(shape)); };
  x_ = act({C, cfg_.hidden_size});
  xn_ = act({C, cfg_.hidden_size});
  proj_ = act({C, cfg_.hidden_size});
  // Tensor parallel on CUDA: row-parallel partials are summed in f32 and rounded
  // once, as the unsharded GEMM rounds its f32 accumulators once.
  if (comm_ && comm_->size() > 1 && device_ == Device::CUDA) proj32_ = empty_tensor(device_, DType::F32, {C, cfg_.hidden_size});
  q_ = act({C, H, D});
  k_ = act({C, KH, D});
  v_ = act({C, KH, D});
  att_ = act({C, H, D});
  gate_ = act({C, w_.local_intermediate});
  up_ = act({C, w_.local_intermediate});
  // pinned on CUDA: a graph step copies the rope rows and the i32 inputs from them
  cossin_ = device_ == Device::CUDA ? pinned_tensor(DType::F32, {2 * C * (D / 2)})
                                    : Tensor::cpu(DType::F32, {2 * C * (D / 2)});
  inv_freq_ = Tensor::cpu(DType::F32, {D / 2});
  if (device_ == Device::CPU) {
    tok_ = Tensor::cpu(DType::I32, {C});
    pos_ = Tensor::cpu(DType::I32, {C});
  } else {
    ints_host_ = pinned_tensor(DType::I32, {3 * C});
    ints_ = empty_tensor(device_, DType::I32, {3 * C});
    Tensor iota = Tensor::cpu(DType::I32, {C});
    for (int64_t i = 0; i < C; ++i) iota.ptr<int32_t>()[i] = int32_t(i);
    rows_ = empty_tensor(device_, DType::I32, {C});
    copy_tensor(rows_, iota);
    dcossin_ = empty_tensor(device_, DType::F32, {2 * C * (D / 2)});
    const int64_t S = std::min<int64_t>(C, kGraphMaxTokens);  // the stacked GEMMs' row bound
    qkv_ = act({S, (H + 2 * KH) * D});
    gu_ = act({S, 2 * w_.local_intermediate});
    x_alt_ = act({S, cfg_.hidden_size});  // the residual's second buffer (StepFusions::fused_norm_gemm)
    fusions_ = step_fusions_for(cfg_.hidden_size);
    attn_split_ = ops::attention_split_slots_for(cfg_.num_kv_heads);
    prefill_ = prefill_options_default();
    dlogits_ = empty_tensor(device_, DType::F32, {std::min<int64_t>(C, kLogitRowsPerLaunch), cfg_.vocab_size});
    logits_host_ = pinned_tensor(DType::F32, {std::min<int64_t>(C, kGraphMaxTokens), w_.lm_head.dim(0)});
    // Greedy ids on the device need the whole vocabulary's argmax on this rank:
    // a reduced vocabulary's maps to token ids there; a vocab-parallel slice's would not.
    greedy_on_device_ = w_.lm_head.dim(0) == cfg_.vocab_size || !w_.head_ids.empty();
    if (greedy_on_device_) {
      dids_ = empty_tensor(device_, DType::I32, {C});
      ids_host_ = pinned_tensor(DType::I32, {std::min<int64_t>(C, kGraphMaxTokens)});
      if (!w_.head_ids.empty()) head_argmax_ = ops::argmax_ids(w_.head_ids, cfg_.vocab_size, device_);
    }
    graphs_on_ = g_cuda_graphs_default && (!comm_ || comm_->graph_capturable());
    pstep_unsupported_ = persistent_step_unsupported_for(cfg_, w_, dtype_);
  }
}

void LlamaModel::set_cuda_graphs(bool on) {
  graphs_on_ = on && device_ == Device::CUDA && (!comm_ || comm_->graph_capturable());
  if (!graphs_on_) graphs_.clear();
}

void LlamaModel::set_step_fusions(const StepFusions& f) {
  fusions_ = f;
  graphs_.clear();  // the recorded steps launch what the old switches chose
}

FullKVCache LlamaModel::make_cache(int64_t capacity) const {
  return FullKVCache(cfg_.num_layers, w_.local_kv_heads, cfg_.head_dim, capacity, device_, dtype_, offload_);
}

Tensor LlamaModel::forward(const std::vector<int32_t>& tokens, FullKVCache& cache, int64_t n_out) {
  std::vector<int64_t> pos(tokens.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = cache.length() + int64_t(i);
  return forward(tokens, pos, cache, n_out);
}

Tensor LlamaModel::forward_capturing_last_query(const std::vector<int32_t>& tokens, FullKVCache& cache,
                                                int64_t n_out, std::vector<std::vector<float>>& last_query) {
  const int64_t row = w_.local_heads * cfg_.head_dim;
  last_query.assign(size_t(cfg_.num_layers), std::vector<float>(size_t(row)));
  // On CUDA each layer's row is a device copy into one buffer, brought back
  // in one copy at the end instead of a copy and a sync per layer.
  if (device_ == Device::CUDA && !qcap_.data) qcap_ = empty_tensor(device_, dtype_, {cfg_.num_layers, row});
  capture_q_ = &last_query;
  try {
    Tensor out = forward(tokens, cache, n_out);
    capture_q_ = nullptr;
    if (device_ == Device::CUDA) {
      const Tensor h = to_host_f32(qcap_);
      for (int64_t l = 0; l < cfg_.num_layers; ++l)
        std::copy_n(h.ptr<float>() + l * row, row, last_query[size_t(l)].data());
    }
    return out;
  } catch (...) {
    capture_q_ = nullptr;
    throw;
  }
}

namespace {
int64_t g_forwarded = 0;  // every model of the process (forwards run on one thread)
int64_t g_greedy_forwards = 0;
int64_t g_sampled_forwards = 0;
}  // namespace

int64_t LlamaModel::process_forwarded_tokens() { return g_forwarded; }
int64_t LlamaModel::process_greedy_forwards() { return g_greedy_forwards; }
int64_t LlamaModel::process_sampled_forwards() { return g_sampled_forwards; }

int64_t LlamaModel::check_forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                                  const FullKVCache& cache, int64_t n_out) const {
  const int64_t n = int64_t(tokens.size());
  TF_CHECK(n > 0, "forward: no tokens");
  TF_CHECK(int64_t(positions.size()) == n,
           "forward: " << n << " tokens but " << positions.size() << " positions");
  if (n_out < 0) n_out = n;
  TF_CHECK(n_out <= n, "forward: asked for " << n_out << " logit rows of " << n << " tokens");
  TF_CHECK(cache.device() == device_ && cache.dtype() == dtype_,
           "forward: a " << dtype_name(cache.dtype()) << " cache for a " << dtype_name(dtype_) << " model on "
                         << (device_ == Device::CUDA ? "CUDA" : "the CPU"));
  TF_CHECK(cache.num_layers() == cfg_.num_layers && cache.num_kv_heads() == w_.local_kv_heads &&
               cache.head_dim() == cfg_.head_dim,
           "forward: KV cache geometry does not match the model");
  TF_CHECK(cache.length() + n <= cache.capacity(),
           "KV cache full: " << cache.length() << " + " << n << " tokens exceed capacity " << cache.capacity());
  for (int64_t i = 0; i < n; ++i)
    TF_CHECK(tokens[size_t(i)] >= 0 && tokens[size_t(i)] < cfg_.vocab_size,
             "forward: token id " << tokens[size_t(i)] << " outside vocabulary of " << cfg_.vocab_size);
  for (int64_t i = 0; i < n; ++i)
    TF_CHECK(positions[i] >= 0 && positions[i] <= std::numeric_limits<int32_t>::max(),
             "forward: position " << positions[i] << " out of range");
  return n_out;
}

void LlamaModel::run_forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                             FullKVCache& cache, int64_t n_out, RowsOut out) {
  const int64_t n = int64_t(tokens.size());
  forwarded_ += n;
  g_forwarded += n;
  std::vector<int32_t> pos32(static_cast<size_t>(n));
  int64_t pmax = 0;
  for (int64_t i = 0; i < n; ++i) {
    pos32[size_t(i)] = int32_t(positions[i]);
    pmax = std::max(pmax, positions[i]);
  }
  // Dynamic NTK: transformers updates once per call from max(position_ids) + 1.
  const RopeTable& rope = rope_.update(pmax + 1);

  const int64_t V = w_.lm_head.dim(0);  // the vocab, or this rank's slice of it (vocab-parallel lm_head)
  const int64_t start_len = cache.length();
  const int64_t out_from = n - n_out;  // first token whose row is returned
  try {
    for (int64_t c0 = 0; c0 < n; c0 += max_chunk_) {
      const int64_t m = std::min(max_chunk_, n - c0);
      RowsOut dst;
      int64_t from = m;
      if (c0 + m > out_from) {
        from = std::max<int64_t>(0, out_from - c0);  // row within chunk
        const int64_t row = c0 + from - out_from;    // row of the call's output
        if (out.device) {
          // dlogits_ holds one chunk's rows: every output row must be in this one.
          TF_CHECK(row == 0 && c0 + m == n, "forward: device rows out span chunks");
          dst.device = true;
        } else if (out.ids) {
          dst.ids = out.ids + row;
        } else {
          dst.logits = out.logits + row * V;
        }
      }
      const int64_t slot = stage_chunk(tokens.data() + c0, pos32.data() + c0, m, cache, rope);
      run_step(m, slot, cache, from, dst, c0 + m == n);
    }
  } catch (...) {
    cache.truncate(start_len);
    throw;
  }
}

void LlamaModel::forward_greedy(const std::vector<int32_t>& tokens, FullKVCache& cache, int64_t n_out,
                                std::vector<int32_t>& ids) {
  std::vector<int64_t> pos(tokens.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = cache.length() + int64_t(i);
  forward_greedy(tokens, pos, cache, n_out, ids);
}

bool LlamaModel::device_argmax_enabled() {
  const char* v = std::getenv("TRIFORCE_DEVICE_ARGMAX");
  return !v || std::string(v) != "0";
}

void LlamaModel::forward_greedy(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                                FullKVCache& cache, int64_t n_out, std::vector<int32_t>& ids) {
  TF_CHECK(greedy_on_device_, "forward_greedy: "
                                  << (device_ == Device::CPU ? "a CPU model" : "a vocab-parallel lm_head shard")
                                  << " takes its greedy ids from forward()'s logits");
  TF_CHECK(!capture_q_, "forward_greedy: not inside forward_capturing_last_query");
  n_out = check_forward(tokens, positions, cache, n_out);
  ids.resize(size_t(n_out));
  RowsOut out;
  out.ids = ids.data();
  run_forward(tokens, positions, cache, n_out, out);
  ++greedy_forwards_;
  ++g_greedy_forwards;
}

bool LlamaModel::greedy_chain_enabled() {
  // On since its first GPU run (results/h100/session-2026-12-07d: the 68M draft's token 10% cheaper, the
  // whole GPU suite green with it); =0 is the k calls' A/B.
  return switch_from_env("TRIFORCE_GREEDY_CHAIN", true);
}

bool LlamaModel::greedy_chain_applies(const FullKVCache& cache, int64_t n, int64_t k) const {
  return device_ == Device::CUDA && graphs_on_ && greedy_on_device() && !comm_ && !cache.offloaded() &&
         !capture_q_ && !fusions_.persistent_step && n >= 1 && n <= kGraphMaxTokens && n <= max_chunk_ && k >= 1 &&
         k <= kGreedyChainMax && k <= max_chunk_ && greedy_chain_enabled();
}

void LlamaModel::forward_greedy_chain(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                                      FullKVCache& cache, int64_t k, std::vector<int32_t>& ids) {
  TF_CHECK(k >= 1, "forward_greedy_chain: k = " << k);
  TF_CHECK(!positions.empty(), "forward_greedy_chain: no tokens");
  const int64_t n = int64_t(tokens.size());
  ids.assign(size_t(k), 0);
  if (!greedy_chain_applies(cache, n, k)) {  // the definition: k calls
    std::vector<int32_t> one;
    forward_greedy(tokens, positions, cache, 1, one);
    ids[0] = one[0];
    for (int64_t i = 1; i < k; ++i) {
      forward_greedy({ids[size_t(i - 1)]}, {positions.back() + i}, cache, 1, one);
      ids[size_t(i)] = one[0];
    }
    return;
  }
  check_forward(tokens, positions, cache, 1);
  TF_CHECK(cache.length() + n + k - 1 <= cache.capacity(),
           "KV cache full: " << cache.length() << " + " << n + k - 1 << " tokens exceed capacity " << cache.capacity());
  TF_CHECK(positions.back() + k - 1 <= std::numeric_limits<int32_t>::max(),
           "forward: position " << positions.back() + k - 1 << " out of range");
  if (!chain_ints_host_.data) {
    chain_ints_host_ = pinned_tensor(DType::I32, {kGreedyChainMax * 3});
    chain_cossin_ = pinned_tensor(DType::F32, {kGreedyChainMax * cfg_.head_dim});
  }
  const int64_t start_len = cache.length();
  try {
    for (int64_t i = 0; i < k; ++i) {
      chain_step_ = int(i);
      const int64_t m = i == 0 ? n : 1;
      std::vector<int32_t> pos32(static_cast<size_t>(m));
      int64_t pmax = 0;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t p = i == 0 ? positions[size_t(j)] : positions.back() + i;
        pos32[size_t(j)] = int32_t(p);
        pmax = std::max(pmax, p);
      }
      const RopeTable& rope = rope_.update(pmax + 1);  // as forward_greedy's call would
      const int32_t placeholder = 0;  // step i >= 1: overwritten on the device by step i-1's argmax
      const int64_t slot = stage_chunk(i == 0 ? tokens.data() : &placeholder, pos32.data(), m, cache, rope);
      RowsOut out;
      out.ids = ids.data() + i;  // only says "argmax ids": the chain's ids stay in dids_ until the end
      run_step(m, slot, cache, m - 1, out, true);
      forwarded_ += m;
      g_forwarded += m;
      ++greedy_forwards_;
      ++g_greedy_forwards;
    }
    chain_step_ = -1;
    copy_bytes(ids.data(), Device::CPU, dids_.data, Device::CUDA, size_t(k) * sizeof(int32_t));  // the one wait
  } catch (...) {
    chain_step_ = -1;
    cache.truncate(start_len);
    throw;
  }
  ++greedy_chains_;
}

bool LlamaModel::device_sampling_enabled() {
  // On since its first H200 run (results/h200/device-sampling); =0 is the host
  // rows' A/B and reference. Read at each call, so a test can switch it.
  return switch_from_env("TRIFORCE_DEVICE_SAMPLING", true);
}

void LlamaModel::forward_distributions(const std::vector<int32_t>& tokens, FullKVCache& cache, int64_t n_out,
                                       const ops::SoftmaxParams& sp, Tensor& rows) {
  std::vector<int64_t> pos(tokens.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = cache.length() + int64_t(i);
  forward_distributions(tokens, pos, cache, n_out, sp, rows);
}

void LlamaModel::forward_distributions(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                                       FullKVCache& cache, int64_t n_out, const ops::SoftmaxParams& sp,
                                       Tensor& rows) {
  TF_CHECK(greedy_on_device_, "forward_distributions: "
                                  << (device_ == Device::CPU ? "a CPU model" : "a vocab-parallel lm_head shard")
                                  << " samples from forward()'s logits on the host");
  TF_CHECK(!capture_q_, "forward_distributions: not inside forward_capturing_last_query");
  n_out = check_forward(tokens, positions, cache, n_out);
  const int64_t V = cfg_.vocab_size, n = int64_t(tokens.size());
  TF_CHECK(rows.device == Device::CUDA && rows.dtype == DType::F32 && rows.shape.size() == 2 &&
               rows.shape[0] == n_out && rows.shape[1] == V,
           "forward_distributions: rows must be CUDA f32 [" << n_out << ", " << V << "], got "
                                                            << shape_str(rows.shape));
  TF_CHECK(n_out >= 1 && n_out <= dlogits_.shape[0] && n_out <= max_chunk_,
           "forward_distributions: " << n_out << " rows out, at most " << std::min(dlogits_.shape[0], max_chunk_));
  // dlogits_ holds the last chunk's rows only: a call whose rows would start in
  // an earlier chunk forwards the tokens before them first (their own call).
  const int64_t last_chunk = (n - 1) / max_chunk_ * max_chunk_;
  if (n - n_out < last_chunk) {
    const int64_t head = n - n_out;
    const std::vector<int32_t> t0(tokens.begin(), tokens.begin() + head), t1(tokens.begin() + head, tokens.end());
    const std::vector<int64_t> p0(positions.begin(), positions.begin() + head),
        p1(positions.begin() + head, positions.end());
    const int64_t start_len = cache.length();
    if (head > 0) run_forward(t0, p0, cache, 0, RowsOut{});
    try {
      forward_distributions(t1, p1, cache, n_out, sp, rows);
    } catch (...) {
      cache.truncate(start_len);
      throw;
    }
    return;
  }
  RowsOut out;
  out.device = true;
  run_forward(tokens, positions, cache, n_out, out);
  const int64_t K = w_.lm_head.dim(0);
  Tensor lg = dlogits_;
  lg.shape = {n_out, K};
  if (head_argmax_.ids.data) {
    // A reduced vocabulary: its logits placed among -inf (what
    // expand_restricted_logits makes on the host), then the softmax in place.
    ops::expand_columns(lg, head_argmax_.ids, -std::numeric_limits<float>::infinity(), rows);
    ops::softmax_top_p(rows, rows, sp);
  } else {
    ops::softmax_top_p(lg, rows, sp);
  }
  ++sampled_forwards_;
  ++g_sampled_forwards;
}

Tensor LlamaModel::forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                           FullKVCache& cache, int64_t n_out) {
  n_out = check_forward(tokens, positions, cache, n_out);
  const int64_t V = w_.lm_head.dim(0);  // the vocab, or this rank's slice of it (vocab-parallel lm_head)
  // Every row is written by the chunks that reach it, so no zero fill.
  Tensor logits = host_f32_unfilled(n_out, V);
  RowsOut out;
  out.logits = logits.ptr<float>();
  run_forward(tokens, positions, cache, n_out, out);
  if (!w_.head_ids.empty()) {  // a draft's reduced vocabulary: q is 0 outside its K ids
    logits = expand_restricted_logits(logits, w_.head_ids, cfg_.vocab_size);
  } else if (V != cfg_.vocab_size) {  // vocab-parallel lm_head: every rank receives every rank's slice
    Tensor full = Tensor::cpu(DType::F32, {n_out, cfg_.vocab_size});
    comm_->allgather_columns(logits, full, vocab_slice_sizes(cfg_.vocab_size, w_.shard.size));
    logits = full;
  }
  return logits;
}

void LlamaModel::stage_inputs(int32_t* h, const int32_t* tokens, const int32_t* positions, int64_t n,
                              int64_t first_slot) {
  std::copy_n(tokens, n, h);
  std::copy_n(positions, n, h + n);
  for (int64_t i = 0; i < n; ++i) h[2 * n + i] = int32_t(first_slot + i);
}

int64_t LlamaModel::stage_chunk(const int32_t* tokens, const int32_t* positions, int64_t n, FullKVCache& cache,
                                const RopeTable& rope) {
  const int64_t half = cfg_.head_dim / 2;
  // A chained step past the first stages into its own ring row, which no queued step reads.
  const bool ring = chain_step_ >= 1;
  if (!ring) staging_free_.wait();  // CUDA: the previous chunk's uploads have read the pinned rows written below
  std::copy(rope.inv_freq.begin(), rope.inv_freq.end(), inv_freq_.ptr<float>());
  const Tensor& rows_buf = ring ? chain_cossin_ : cossin_;
  const int64_t r0 = ring ? chain_step_ * 2 * half : 0;
  Tensor cs = ops::slice_rows(rows_buf, r0, r0 + n * half);
  Tensor sn = ops::slice_rows(rows_buf, r0 + n * half, r0 + 2 * n * half);
  cs.shape = sn.shape = {n, half};
  // The cos/sin rows are computed on the host in both cases (fp32, exactly as
  // transformers does); CUDA gets them with the token ids in two small copies.
  Tensor host_pos = Tensor::cpu(DType::I32, {n});
  std::copy_n(positions, n, host_pos.ptr<int32_t>());
  ops::rope_cos_sin(inv_freq_, host_pos, cs, sn, ops::RopeParams{rope.attention_scaling});
  const int64_t slot = cache.append_slots(positions, n);
  if (device_ == Device::CUDA) {
    stage_inputs(ring ? chain_ints_host_.ptr<int32_t>() + chain_step_ * 3 : ints_host_.ptr<int32_t>(), tokens,
                 positions, n, slot);
  } else {
    std::copy_n(tokens, n, tok_.ptr<int32_t>());
    std::copy_n(positions, n, pos_.ptr<int32_t>());
  }
  return slot;
}

void LlamaModel::run_step(int64_t n, int64_t slot, FullKVCache& cache, int64_t out_from, RowsOut out,
                          bool capture_last_row) {
  // Prefill-sized calls, the query-capturing prefill and offloaded caches
  // (their copies follow the host length) stay eager.
  if (!graphs_on_ || n > kGraphMaxTokens || n > max_chunk_ || capture_q_ || cache.offloaded())
    return run_chunk(n, slot, cache, out_from, out, capture_last_row, nullptr);
  GraphLaunch g;
  g.grid_slots = graph_grid_slots(cache.length(), cache.capacity(), attn_split_);
  const size_t ws = ops::attention_workspace_bytes(n, w_.local_heads, cfg_.head_dim, g.grid_slots, attn_split_);
  if (size_t(attn_ws_.bytes()) < ws) {
    if (chain_step_ >= 1) stream_synchronize();  // the chain's queued steps still read the old scratch
    graphs_.clear();  // every graph points at the old scratch
    const size_t grown = std::max(ws, 2 * size_t(attn_ws_.bytes()));
    attn_ws_ = empty_tensor(device_, DType::F32, {int64_t((grown + 3) / 4)});
  }
  const int64_t rows_out = out && out_from < n ? n - out_from : 0;
  const ops::KVView v0 = cache.view(0);
  StepGraphKey key;
  key.n = n, key.rows_out = rows_out, key.ids = rows_out && out.ids, key.grid_slots = g.grid_slots;
  key.device_rows = rows_out && out.device;
  key.chain = chain_step_;
  key.capacity = cache.capacity();
  key.k = v0.dev_k, key.v = v0.dev_v, key.length = v0.dev_length, key.workspace = attn_ws_.data;
  RowsOut staged;  // pinned, so the graph's copy of the rows is a node that does not wait
  if (key.device_rows) staged.device = true;
  else if (key.ids) staged.ids = ids_host_.ptr<int32_t>();
  else if (rows_out) staged.logits = logits_host_.ptr<float>();
  graphs_.run(key, [&] { run_chunk(n, slot, cache, rows_out ? out_from : n, staged, capture_last_row, &g); });
  // Nothing to read here (a chained step's id stays in dids_ for the next): the next stage_chunk waits for the
  // replay's uploads.
  if (!rows_out || key.device_rows || chain_step_ >= 0) {
    staging_free_.record();
    return;
  }
  stream_synchronize();  // the rows (the call's one wait), and the staging free for the next step
  if (key.ids) std::copy_n(staged.ids, size_t(rows_out), out.ids);
  else std::copy_n(staged.logits, size_t(rows_out) * size_t(w_.lm_head.dim(0)), out.logits);
}

void LlamaModel::run_chunk(int64_t n, int64_t slot, FullKVCache& cache, int64_t out_from, RowsOut out,
                           bool capture_last_row, const GraphLaunch* g) {
  using ops::slice_rows;
  const bool cuda = device_ == Device::CUDA;
  const int64_t H = w_.local_heads, KH = w_.local_kv_heads, D = cfg_.head_dim;
  Tensor x = slice_rows(x_, 0, n), xn = slice_rows(xn_, 0, n), proj = slice_rows(proj_, 0, n);
  Tensor q = slice_rows(q_, 0, n), k = slice_rows(k_, 0, n), v = slice_rows(v_, 0, n);
  Tensor att = slice_rows(att_, 0, n), gate = slice_rows(gate_, 0, n), up = slice_rows(up_, 0, n);
  // proj = in . W^T summed over the tensor-parallel ranks (o and down are row-parallel).
  // An NCCL kernel is not PDL-aware: the kernel after it launches normally.
  // silu_halves: `in` is the stacked gate/up output and the GEMM reads
  // silu(gate) * up from it (StepFusions::fused_silu_down; `gate` is the
  // scratch where it cannot).
  auto row_parallel_linear = [&](const Tensor& in, const Tensor& W, bool silu_halves = false) {
    auto lin = [&](Tensor& out) {
      if (silu_halves) ops::linear_silu_mul_halves(in, W, out, gate);
      else ops::linear(in, W, out);
    };
    if (!proj32_.data) {
      lin(proj);
      if (comm_) {
        comm_->allreduce_sum(proj);
        ops::step_launch_break();
      }
      return;
    }
    Tensor p32 = slice_rows(proj32_, 0, n);
    lin(p32);
    comm_->allreduce_sum(p32);
    ops::step_launch_break();
    ops::cast(p32, proj);
  };
  const int64_t half = D / 2;
  // [n, half] views at element offset `at` of a flat buffer
  auto rows_at = [&](const Tensor& flat, int64_t at, int64_t cols) {
    Tensor t = ops::slice_rows(flat, at, at + n * cols);
    t.shape = {n, cols};
    return t;
  };
  Tensor cs = rows_at(cossin_, 0, half), sn = rows_at(cossin_, n * half, half);
  Tensor tok = cuda ? slice_rows(ints_, 0, n) : slice_rows(tok_, 0, n);
  Tensor pos = cuda ? slice_rows(ints_, n, 2 * n) : slice_rows(pos_, 0, n);
  auto flat = [](const Tensor& t, int64_t cols) {  // [n, a, b] -> [n, a*b] view
    Tensor f = t;
    f.shape = {t.shape[0], cols};
    return f;
  };
  Tensor q2 = flat(q, H * D), k2 = flat(k, KH * D), v2 = flat(v, KH * D), att2 = flat(att, H * D);

  const ops::RmsNormParams np{float(cfg_.rms_norm_eps)};
  ops::AttentionParams ap;
  ap.num_heads = H;
  ap.num_kv_heads = KH;
  ap.head_dim = D;
  ap.combine_in_split = cuda && fusions_.fused_combine;
  ap.direct_single_split = fusions_.direct_single_split;
  ap.split_slots = attn_split_;
  if (g) {
    ap.grid_slots = g->grid_slots;
    ap.workspace = attn_ws_.data;
    ap.workspace_bytes = attn_ws_.bytes();
  }

  // A small model's whole step as one launch (model/persistent_step.cpp), bit-identical to the per-op step.
  const bool persistent = cuda && persistent_applies(n, cache);
  // Programmatic dependent launch between the step's kernels (StepFusions::pdl),
  // from the inputs kernel (StepFusions::inputs_kernel; else the embedding,
  // after the input copies) to the lm_head; never for prefill-sized chunks,
  // the query capture (a copy per layer), an offloaded cache (copies between
  // the layers) or the persistent step.
  const ops::StepLaunchOverlap overlap(cuda && fusions_.pdl && n <= kGraphMaxTokens && !capture_q_ &&
                                       !cache.offloaded() && !persistent);
  Tensor dcs, dsn, rows, qslots;
  if (cuda) {
    // From the pinned staging, without waiting: inside a graph the copy nodes
    // (or the inputs kernel) read it at replay; eagerly the next stage_chunk
    // waits for them (staging_free_) before it writes the staging again. A
    // chained step's token is the previous step's argmax, over the staged
    // placeholder.
    const bool ring = chain_step_ >= 1;
    const int32_t* ints_src = ring ? chain_ints_host_.ptr<int32_t>() + chain_step_ * 3 : ints_host_.ptr<int32_t>();
    const float* rows_src = ring ? chain_cossin_.ptr<float>() + chain_step_ * 2 * half : cossin_.ptr<float>();
    const int32_t* token = ring ? dids_.ptr<int32_t>() + (chain_step_ - 1) : nullptr;
    if (fusions_.inputs_kernel && n <= kGraphMaxTokens) {  // a prefill chunk's megabytes of rows: the copy engine
      ops::StepInputs in;
      in.ints_host = ints_src, in.ints = ints_.data, in.n_ints = 3 * n;
      in.rows_host = rows_src, in.rows = dcossin_.data, in.n_rows = 2 * n * half;
      in.token = token;
      ops::stage_step_inputs(in);
    } else {
      copy_bytes_async(ints_.data, device_, ints_src, Device::CPU, size_t(3 * n) * sizeof(int32_t));
      copy_bytes_async(dcossin_.data, device_, rows_src, Device::CPU, size_t(2 * n * half) * sizeof(float));
      if (token) copy_bytes_async(ints_.data, device_, token, device_, sizeof(int32_t));
    }
    if (!g) staging_free_.record();
    dcs = rows_at(dcossin_, 0, half), dsn = rows_at(dcossin_, n * half, half);
    rows = slice_rows(rows_, 0, n), qslots = slice_rows(ints_, 2 * n, 3 * n);
  }
  cache.offload_begin(slot);  // [KV offload hook] first offloaded layer's H2D (no-op on a device cache)
  if (persistent) return run_persistent(n, cache, out_from, out, g);

  // Step fusions (model/step_fusions.h), CUDA only; each is bit-identical to
  // the ops it replaces. The stacked GEMMs serve every step of <= 32 tokens
  // (one-token steps always), the skinny GEMM's range, where a row's result
  // does not depend on the other rows; the fused RoPE + KV write needs the
  // cache's own storage (an offloaded layer is written at the host slot).
  const bool want_logits = out && out_from < n;  // logits rows, or their argmax ids
  const bool stack_step = cuda && n <= qkv_.shape[0] && (n == 1 || fusions_.stacked_gemms);
  // A prefill chunk's stacked GEMMs (model/prefill_options.h) use their own
  // [max_chunk, ...] outputs; the step's stay [32, ...].
  const bool stack_prefill = cuda && !stack_step && n > kGraphMaxTokens && prefill_.stacked_gemms;
  Tensor qkv_out, gu_out;
  if (stack_step) {
    qkv_out = slice_rows(qkv_, 0, n), gu_out = slice_rows(gu_, 0, n);
  } else if (stack_prefill) {
    if (!prefill_qkv_.data) {
      prefill_qkv_ = empty_tensor(device_, dtype_, {max_chunk_, (H + 2 * KH) * D});
      prefill_gu_ = empty_tensor(device_, dtype_, {max_chunk_, 2 * w_.local_intermediate});
    }
    qkv_out = slice_rows(prefill_qkv_, 0, n), gu_out = slice_rows(prefill_gu_, 0, n);
  }
  const bool rope_to_cache = cuda && fusions_.fused_rope_kv && !cache.offloaded();
  // The GEMM epilogue fusions (StepFusions::fused_qkv_rope, fused_gate_up_silu)
  // take the stacked GEMMs of a step (the skinny kernel's <= 32 rows), the
  // q/k/v one only where RoPE writes the cache (its epilogue does).
  const bool qkv_rope = stack_step && rope_to_cache && fusions_.fused_qkv_rope;
  const bool gate_up_silu = stack_step && fusions_.fused_gate_up_silu;
  const bool fuse_norm = cuda && fusions_.fused_add_norm;
  ops::RmsNormParams np_stored = np;  // the closing add + next norm: the norm of the stored sum, as unfused
  np_stored.rounded_sum = true;

  // StepFusions::fused_norm_gemm: each stacked GEMM of a step computes its
  // input's RMSNorm, and the residual add before it, in its prologue
  // (ops::norm_linear). Its blocks all read the old sum while block 0 stores
  // the new one, so the residual alternates between x and x_alt; `x` names the
  // current one. The whole step or none of it (every layer stacked; the first
  // call tells whether the kernel takes the shape).
  bool norm_gemm = stack_step && fusions_.fused_norm_gemm && n <= x_alt_.shape[0];
  for (const LayerWeights& L : w_.layers) norm_gemm = norm_gemm && L.wqkv.data && L.w_gate_up.data;
  Tensor x_other = norm_gemm ? slice_rows(x_alt_, 0, n) : Tensor{};
  auto norm_linear = [&](const Tensor* add, const Tensor& norm_w, const ops::RmsNormParams& p, const Tensor& W,
                         Tensor& y) {
    const bool done = ops::norm_linear(x, add, add ? &x_other : nullptr, norm_w, p, W, y);
    TF_CHECK(done, "forward: the norm-prologue GEMM refused a shape it took at layer 0");
    if (add) std::swap(x, x_other);
  };

  bool norm_epilogue = false;  // a norm-prologue GEMM ran an epilogue too (norm_epilogue_chunks)
  ops::embedding(w_.embed, tok, x);
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const LayerWeights& L = w_.layers[size_t(l)];
    // With the norm prologue the q/k/v GEMM's RoPE epilogue joins it: the norm,
    // the GEMM, RoPE and the cache write in one launch, where it takes the
    // shape (else the norm-prologue GEMM below, then RoPE).
    bool norm_rope = false;
    if (norm_gemm && qkv_rope) {
      Tensor kc = cache.layer_k(l), vc = cache.layer_v(l);
      const Tensor* add = l == 0 ? nullptr : &proj;  // the closing add deferred here
      norm_rope = ops::norm_linear_rope_qkv_to_cache(x, add, add ? &x_other : nullptr, L.attn_norm,
                                                     add ? np_stored : np, L.wqkv, dcs, dsn, rows, qslots, q, kc, vc);
      if (norm_rope && add) std::swap(x, x_other);
      norm_epilogue = norm_epilogue || norm_rope;
    }
    if (norm_rope) {
      // q rotated, the cache layer written
    } else if (l == 0 && norm_gemm) {
      norm_gemm = ops::norm_linear(x, nullptr, nullptr, L.attn_norm, np, L.wqkv, qkv_out);
    } else if (norm_gemm) {
      norm_linear(&proj, L.attn_norm, np_stored, L.wqkv, qkv_out);  // the closing add deferred here
    }
    if (!norm_gemm && (l == 0 || !fuse_norm)) ops::rmsnorm(x, L.attn_norm, xn, np);  // else the previous layer's add left it in xn
    const bool stacked = (stack_step || stack_prefill) && L.wqkv.data && L.w_gate_up.data;
    ops::QKVRows qkv_in;
    const bool rope_epilogue = stacked && qkv_rope && !norm_gemm;
    if (!stacked) {
      ops::linear(xn, L.wq, q2);
      ops::linear(xn, L.wk, k2);
      ops::linear(xn, L.wv, v2);
      qkv_in = ops::qkv_rows(q, k, v);
    } else if (!rope_epilogue && !norm_rope) {  // with either, RoPE and the cache write run in a GEMM's epilogue
      if (!norm_gemm) ops::linear(xn, L.wqkv, qkv_out);
      qkv_in = ops::qkv_rows(qkv_out, H, KH, D);
    }
    // After this block q holds the rotated queries and the cache layer l the
    // chunk's K/V (capture_q_ reads q in between on the unfused paths).
    if (norm_rope) {
      // done above
    } else if (rope_to_cache) {
      Tensor kc = cache.layer_k(l), vc = cache.layer_v(l);
      if (rope_epilogue) ops::linear_rope_qkv_to_cache(xn, L.wqkv, dcs, dsn, rows, qslots, q, kc, vc, qkv_out);
      else ops::rope_qkv_to_cache(qkv_in, dcs, dsn, rows, qslots, q, kc, vc);
    } else {
      if (!cuda) {
        ops::rope_apply(q, cs, sn);
        ops::rope_apply(k, cs, sn);
      } else if (stacked) {
        ops::rope_qkv_split(qkv_in, dcs, dsn, rows, q, k, v);
      } else {
        ops::rope_apply_rows(q, k, dcs, dsn, rows);
      }
      cache.offload_before_layer(l, slot);  // [KV offload hook] wait for layer l, prefetch l + 1
      // Slots from the device, so a graph replay writes where it should; an
      // offloaded cache (never captured) writes its staging slot at the host slot.
      if (cuda && !cache.offloaded()) cache.write_at(l, qslots, k, v);
      else cache.write(l, slot, k, v);
    }
    if (capture_q_ && capture_last_row) {
      const Tensor last = slice_rows(q2, n - 1, n);
      if (cuda) {
        copy_bytes_async(static_cast<uint8_t*>(qcap_.data) + size_t(l) * last.bytes(), device_, last.data, device_,
                         last.bytes());
      } else {
        std::copy_n(last.ptr<float>(), H * D, (*capture_q_)[size_t(l)].data());
      }
    }
    ops::attention(q, cuda ? qslots : pos, cache.view(l), att, ap);
    cache.offload_after_layer(l, slot, n);  // [KV offload hook] new rows back to the host
    row_parallel_linear(att2, L.wo);
    // As for RoPE: with the norm prologue the SwiGLU epilogue joins it where it
    // takes the shape (x += attn; gate = silu_mul_halves(norm(x) . W^T)).
    bool norm_silu = false;
    if (norm_gemm && gate_up_silu) {
      norm_silu = ops::norm_linear_gate_up_silu(x, &proj, &x_other, L.mlp_norm, np, L.w_gate_up, gate);
      if (norm_silu) std::swap(x, x_other);
      norm_epilogue = norm_epilogue || norm_silu;
    }
    if (norm_silu) {
      // gate holds the SwiGLU
    } else if (norm_gemm) {
      norm_linear(&proj, L.mlp_norm, np, L.w_gate_up, gu_out);  // x += attn; gu = norm(x) . W^T
    } else {
      ops::add_rmsnorm(x, proj, L.mlp_norm, xn, np);  // x += attn; xn = norm(x)
    }
    if (norm_silu) {
      row_parallel_linear(gate, L.w_down);
    } else if (stacked && gate_up_silu && !norm_gemm) {  // before fused_silu_down: the SwiGLU once per element, not per down tile
      ops::linear_gate_up_silu(xn, L.w_gate_up, gate, gu_out);
      row_parallel_linear(gate, L.w_down);
    } else if (stacked) {
      if (!norm_gemm) ops::linear(xn, L.w_gate_up, gu_out);
      if (fusions_.fused_silu_down && stack_step) {  // the fused down GEMM is the skinny (<= 32-row) kernel
        row_parallel_linear(gu_out, L.w_down, true);
      } else {
        ops::silu_mul_halves(gu_out, gate);
        row_parallel_linear(gate, L.w_down);
      }
    } else {
      ops::linear(xn, L.w_gate, gate);
      ops::linear(xn, L.w_up, up);
      ops::silu_mul(gate, up, gate);
      row_parallel_linear(gate, L.w_down);
    }
    if (norm_gemm && l + 1 < cfg_.num_layers) {
      // the next layer's q/k/v GEMM adds and normalizes
    } else if (fuse_norm && l + 1 < cfg_.num_layers) {
      ops::add_rmsnorm(x, proj, w_.layers[size_t(l + 1)].attn_norm, xn, np_stored);  // x += mlp; xn = next norm
    } else if ((fuse_norm || norm_gemm) && want_logits) {
      ops::add_rmsnorm(x, proj, w_.final_norm, xn, np_stored);  // every row: a row's norm depends on it alone
    } else {
      ops::add_inplace(x, proj);
    }
  }
  if (norm_gemm) ++norm_gemm_chunks_;
  if (norm_epilogue) ++norm_epilogue_chunks_;
  if (want_logits) {
    Tensor xs = slice_rows(x, out_from, n), xo = slice_rows(xn, out_from, n);
    if (!fuse_norm && !norm_gemm) ops::rmsnorm(xs, w_.final_norm, xo, np);
    const int64_t rows_out = n - out_from;
    const int64_t V = w_.lm_head.dim(0);  // the vocab, or this rank's slice of it (vocab-parallel lm_head)
    if (!cuda) {
      TF_CHECK(out.logits, "forward: greedy ids on the device of a CPU model");
      Tensor lg;
      lg.data = out.logits;
      lg.dtype = DType::F32;
      lg.shape = {rows_out, V};
      ops::linear(xo, w_.lm_head, lg);
      return;
    }
    const int64_t block = dlogits_.shape[0];
    for (int64_t r0 = 0; r0 < rows_out; r0 += block) {
      const int64_t m = std::min(block, rows_out - r0);
      Tensor lg = dlogits_;  // [m, V] at the start of the scratch
      lg.shape = {m, V};
      Tensor xr = slice_rows(xo, r0, r0 + m);
      ops::linear(xr, w_.lm_head, lg);
      if (out.device) {  // the rows stay where they are, for forward_distributions
        TF_CHECK(rows_out <= block, "forward: " << rows_out << " device rows out, at most " << block);
        continue;
      }
      if (out.ids) {
        // A step kernel: the next block's lm_head may overlap its tail. A chained step's id goes to its own row.
        argmax_rows(r0 + std::max(chain_step_, 0), m);
        continue;
      }
      if (g) copy_bytes_async(out.logits + r0 * V, Device::CPU, lg.data, Device::CUDA, lg.bytes());
      else copy_bytes(out.logits + r0 * V, Device::CPU, lg.data, Device::CUDA, lg.bytes());
      ops::step_launch_break();  // a copy is no kernel: the next block's lm_head launches normally
    }
    if (out.ids && chain_step_ < 0) {  // the chunk's one copy back: rows_out int32 (a chain copies once, at its end)
      const size_t bytes = size_t(rows_out) * sizeof(int32_t);
      if (g) copy_bytes_async(out.ids, Device::CPU, dids_.data, Device::CUDA, bytes);
      else copy_bytes(out.ids, Device::CPU, dids_.data, Device::CUDA, bytes);
      ops::step_launch_break();
    }
  }
}

void LlamaModel::argmax_rows(int64_t r0, int64_t m) {
  Tensor lg = dlogits_;
  lg.shape = {m, w_.lm_head.dim(0)};
  Tensor ids = ops::slice_rows(dids_, r0, r0 + m);
  ops::argmax(lg, ids, head_argmax_.ids.data ? &head_argmax_ : nullptr);
}

std::vector<int32_t> greedy_generate(LlamaModel& model, const std::vector<int32_t>& prompt, int64_t n_new) {
  TF_CHECK(!prompt.empty(), "greedy_generate: empty prompt");
  FullKVCache cache = model.make_cache(int64_t(prompt.size()) + n_new + 1);
  std::vector<int32_t> out;
  Tensor lg = model.forward(prompt, cache, 1);
  Tensor best = Tensor::cpu(DType::I32, {1});
  for (int64_t i = 0; i < n_new; ++i) {
    ops::argmax(lg, best);
    out.push_back(best.ptr<int32_t>()[0]);
    if (i + 1 < n_new) lg = model.forward({out.back()}, cache, 1);
  }
  return out;
}

}  // namespace tf
