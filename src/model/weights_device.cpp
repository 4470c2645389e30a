#include "model/weights_device.h"

#include <algorithm>

#include "core/device.h"
#include "io/hf_config.h"
#ifdef TRIFORCE_HAVE_CUDA
#include "elementwise.cuh"
#endif

namespace tf {

namespace {

// Host f32 matrices with equal column counts stacked by rows.
Tensor stack_rows(std::initializer_list<const Tensor*> parts) {
  int64_t rows = 0;
  const int64_t cols = (*parts.begin())->dim(1);
  for (const Tensor* t : parts) rows += t->dim(0);
  Tensor out = Tensor::cpu(DType::F32, {rows, cols});
  float* dst = out.ptr<float>();
  for (const Tensor* t : parts) {
    std::copy_n(t->ptr<float>(), t->numel(), dst);
    dst += t->numel();
  }
  return out;
}

// Row-block views of a stacked matrix (sharing its storage).
void split_views(const Tensor& whole, std::initializer_list<Tensor*> views, std::initializer_list<int64_t> rows) {
  int64_t r0 = 0;
  auto it = rows.begin();
  for (Tensor* v : views) {
    *v = whole;
    v->shape = {*it, whole.dim(1)};
    v->data = static_cast<uint8_t*>(whole.data) + size_t(r0 * whole.dim(1)) * dtype_size(whole.dtype);
    r0 += *it++;
  }
}

}  // namespace

LlamaWeights upload_weights(const LlamaWeights& h, Device dev, DType dt) {
  LlamaWeights w;
  w.shard = h.shard;
  w.local_heads = h.local_heads, w.local_kv_heads = h.local_kv_heads, w.local_intermediate = h.local_intermediate;
  auto up = [&](const Tensor& t) { return to_device_as(t, dev, dt); };
  if (h.embed.data) w.embed = up(h.embed);  // empty: a draft's borrowed embedding, attached after the upload
  w.final_norm = up(h.final_norm);
  w.lm_head = h.lm_head.data == h.embed.data ? w.embed : up(h.lm_head);
  w.head_rows = h.head_rows;
  w.head_ids = h.head_ids;
  for (const LayerWeights& L : h.layers) {
    LayerWeights d;
    d.attn_norm = up(L.attn_norm), d.mlp_norm = up(L.mlp_norm);
    d.wo = up(L.wo), d.w_down = up(L.w_down);
    d.wqkv = up(stack_rows({&L.wq, &L.wk, &L.wv}));
    d.w_gate_up = up(stack_rows({&L.w_gate, &L.w_up}));
    split_views(d.wqkv, {&d.wq, &d.wk, &d.wv}, {L.wq.dim(0), L.wk.dim(0), L.wv.dim(0)});
    split_views(d.w_gate_up, {&d.w_gate, &d.w_up}, {L.w_gate.dim(0), L.w_up.dim(0)});
    w.layers.push_back(std::move(d));
  }
  return w;
}

namespace {

// The published config.json of each model, trimmed to what the forward reads.
struct Synthetic {
  const char* name;
  const char* config_json;
};
const Synthetic kSynthetic[] = {
    {"llama2-7b-128k",  // NousResearch/Yarn-Llama-2-7b-128k
     R"({"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":11008,
        "num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":32,"vocab_size":32000,
        "max_position_embeddings":131072,"rms_norm_eps":1e-5,"rope_theta":10000.0,
        "rope_scaling":{"type":"yarn","factor":32.0,"original_max_position_embeddings":4096},
        "bos_token_id":1,"eos_token_id":2,"tie_word_embeddings":false,"torch_dtype":"bfloat16"})"},
    {"llama3.1-8b",  // meta-llama/Llama-3.1-8B
     R"({"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":14336,
        "num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"vocab_size":128256,
        "max_position_embeddings":131072,"rms_norm_eps":1e-5,"rope_theta":500000.0,
        "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
                        "original_max_position_embeddings":8192},
        "bos_token_id":128000,"eos_token_id":128001,"tie_word_embeddings":false,"torch_dtype":"bfloat16"})"},
    {"smollm2-135m",  // HuggingFaceTB/SmolLM2-135M
     R"({"architectures":["LlamaForCausalLM"],"hidden_size":576,"intermediate_size":1536,
        "num_hidden_layers":30,"num_attention_heads":9,"num_key_value_heads":3,"vocab_size":49152,
        "max_position_embeddings":8192,"rms_norm_eps":1e-5,"rope_theta":100000.0,
        "bos_token_id":0,"eos_token_id":0,"tie_word_embeddings":true,"torch_dtype":"bfloat16"})"},
    {"llama-68m",  // JackFram/llama-68m, the paper's draft model
     R"({"architectures":["LlamaForCausalLM"],"hidden_size":768,"intermediate_size":3072,
        "num_hidden_layers":2,"num_attention_heads":12,"num_key_value_heads":12,"vocab_size":32000,
        "max_position_embeddings":2048,"rms_norm_eps":1e-6,"rope_theta":10000.0,
        "bos_token_id":0,"eos_token_id":2,"tie_word_embeddings":false,"torch_dtype":"float32"})"},
};
const std::string kPrefix = "synthetic:";

const Synthetic& find(const std::string& path) {
  const std::string name = path.substr(kPrefix.size());
  for (const auto& s : kSynthetic)
    if (name == s.name) return s;
  std::string names;
  for (const auto& s : kSynthetic) names += std::string(names.empty() ? "" : ", ") + kPrefix + s.name;
  TF_FAIL("--target " << path << ": unknown synthetic model; expected one of " << names);
}

}  // namespace

bool is_synthetic_path(const std::string& path) { return path.rfind(kPrefix, 0) == 0; }

std::vector<std::string> synthetic_model_names() {
  std::vector<std::string> v;
  for (const auto& s : kSynthetic) v.push_back(kPrefix + s.name);
  return v;
}

ModelConfig synthetic_config(const std::string& path) {
  const Synthetic& s = find(path);
  return config_from_hf_json_text(s.config_json, path);
}

LlamaWeights synthetic_weights(const ModelConfig& cfg, Device dev, DType dt, uint64_t seed, ShardSpec shard) {
  if (dev == Device::CPU) {
    TF_CHECK(dt == DType::F32, "synthetic weights on the CPU are f32");
    TF_CHECK(shard.size == 1, "synthetic weights on the CPU are made in one process (tensor parallelism needs CUDA)");
    return LlamaWeights::random(cfg, seed);
  }
#ifdef TRIFORCE_HAVE_CUDA
  const int64_t hd = cfg.head_dim, hid = cfg.hidden_size, inter = cfg.intermediate_size;
  const int64_t H = cfg.num_heads, KH = cfg.num_kv_heads, N = shard.size;
  TF_CHECK(N >= 1 && shard.rank >= 0 && shard.rank < N, "synthetic weights: shard " << shard.rank << " of " << N);
  TF_CHECK(KH >= N && inter % N == 0,
           "tensor-parallel size " << N << " must not exceed the model's " << KH << " KV heads (" << H
                                   << " query heads) and must divide its intermediate size " << inter);
  // This rank's heads and intermediate rows, as LlamaWeights::load slices a checkpoint.
  const VocabSlice kvs = kv_head_slice(KH, shard.rank, N);
  const int64_t kvl = kvs.size(), hl = kvl * (H / KH), il = inter / N;
  const int64_t kv0 = kvs.begin, h0 = kvs.begin * (H / KH), i0 = shard.rank * il;
  const int64_t qd = H * hd, kd = KH * hd;
  // Each tensor of the unsharded model has its own Philox seed, drawn in a
  // fixed order, and a shard fills windows of it: every TP size gets the
  // same numbers.
  uint64_t stream = seed * 1000003ull;
  struct Window {
    int64_t first_row, rows, first_col, cols, full_cols;
  };
  auto fill = [&](std::vector<int64_t> shape, bool norm, std::initializer_list<Window> windows = {}) {
    Tensor t = empty_tensor(dev, dt, std::move(shape));
    cuda::RandomFillParams p;
    p.dtype = dt, p.seed = ++stream;
    p.mean = norm ? 1.0f : 0.0f, p.scale = norm ? 0.2f : 0.02f, p.uniform = norm;
    if (windows.size() == 0) {
      p.out = t.data, p.count = t.numel();
      cuda::random_fill(p);
      return t;
    }
    int64_t at = 0;  // the windows stack by rows in t
    for (const Window& w : windows) {
      p.out = static_cast<uint8_t*>(t.data) + size_t(at) * dtype_size(dt);
      p.count = w.rows * w.cols;
      p.first = w.first_row * w.full_cols + w.first_col, p.cols = w.cols, p.full_cols = w.full_cols;
      cuda::random_fill(p);
      at += p.count;
    }
    return t;
  };
  LlamaWeights w;
  w.shard = shard;
  w.local_heads = hl, w.local_kv_heads = kvl, w.local_intermediate = il;
  w.embed = fill({cfg.vocab_size, hid}, false);
  w.final_norm = fill({hid}, true);
  w.head_rows = shard.vocab_parallel_head && N > 1 ? vocab_slice(cfg.vocab_size, shard.rank, N)
                                                   : VocabSlice{0, cfg.vocab_size};
  const int64_t vr = w.head_rows.size();
  if (cfg.tie_word_embeddings) {
    w.lm_head = w.embed;  // a view of this rank's embedding rows
    w.lm_head.data = static_cast<uint8_t*>(w.embed.data) + size_t(w.head_rows.begin * hid) * dtype_size(dt);
    w.lm_head.shape = {vr, hid};
  } else {
    w.lm_head = fill({vr, hid}, false, {{w.head_rows.begin, vr, 0, hid, hid}});
  }
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    LayerWeights L;
    L.attn_norm = fill({hid}, true), L.mlp_norm = fill({hid}, true);
    // the whole stacked [q; k; v] is [qd + 2 kd, hid]; this rank's rows of each
    L.wqkv = fill({(hl + 2 * kvl) * hd, hid}, false,
                  {{h0 * hd, hl * hd, 0, hid, hid}, {qd + kv0 * hd, kvl * hd, 0, hid, hid},
                   {qd + kd + kv0 * hd, kvl * hd, 0, hid, hid}});
    split_views(L.wqkv, {&L.wq, &L.wk, &L.wv}, {hl * hd, kvl * hd, kvl * hd});
    L.wo = fill({hid, hl * hd}, false, {{0, hid, h0 * hd, hl * hd, qd}});  // row-parallel: its columns
    L.w_gate_up = fill({2 * il, hid}, false, {{i0, il, 0, hid, hid}, {inter + i0, il, 0, hid, hid}});
    split_views(L.w_gate_up, {&L.w_gate, &L.w_up}, {il, il});
    L.w_down = fill({hid, il}, false, {{0, hid, i0, il, inter}});
    w.layers.push_back(std::move(L));
  }
  device_synchronize();
  return w;
#else
  TF_FAIL("synthetic weights on CUDA: triforce was built without CUDA");
#endif
}

}  // namespace tf
