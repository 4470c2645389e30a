// The retrieval cache's device build (kv/retrieval_device, kernels/
// retrieval_select) against the CPU reference (select_chunks + gather_slots)
// on the same keys: a CPU cache's f32 keys rounded to bf16/f16 and uploaded,
// the CPU reference computed on the rounded values.
//
// - Integer keys and queries: every score is exact in fp32 and in double, so
//   the chunk ids must be equal, and such data ties a lot (the lower chunk
//   index must win, as the CPU's stable sort has it).
// - Normal keys: the device sums in fp32 and the CPU in double, so a chunk may
//   trade places with another only where their CPU scores lie within rounding
//   of the threshold, and never between two exactly equal scores (duplicated
//   chunks, planted on purpose, score identically on both).
// Shapes: chunk 1/8/16, budgets below/at/above the prompt, chunk counts that
// are not multiples of the 512-thread block, remainder 0 and > 0, MHA and GQA,
// head_dim 128/64 and 40 (the score kernel's generic lane mapping). The
// gathered K/V must equal the CPU gather bit for bit, over a poisoned
// destination; an offloaded source gives the device cache's result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "core/device.h"
#include "core/half.h"
#include "kv/retrieval_cache.h"
#include "model/checkpoint.h"
#include "model/weights_device.h"
#include "require_device.h"
#include "speculative/prefill.h"

using namespace tf;

namespace {

const std::string kFixtures = TF_FIXTURES;

enum class Data { integer, normal };

struct Case {
  int64_t layers = 2, kv_heads = 2, heads = 2, head_dim = 128;
  int64_t n_tokens = 0;  // scored prompt tokens (P - 1)
  int64_t chunk = 8, budget = 64;
  Data data = Data::normal;
  uint64_t seed = 1;
  std::string name() const {
    return "L" + std::to_string(layers) + " KH" + std::to_string(kv_heads) + " H" + std::to_string(heads) + " D" +
           std::to_string(head_dim) + " n" + std::to_string(n_tokens) + " chunk" + std::to_string(chunk) + " budget" +
           std::to_string(budget) + (data == Data::integer ? " integer" : " normal") + " seed" + std::to_string(seed);
  }
};

float round_to(float x, DType t) {
  return t == DType::F16 ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
}

// The same K/V on the CPU (f32, rounded to dt) and on the device (dt); the
// query per layer ([heads * head_dim], host f32).
struct Inputs {
  std::unique_ptr<FullKVCache> cpu, dev;
  std::vector<std::vector<float>> q;
};

Inputs make_inputs(const Case& c, DType dt) {
  const int64_t L = c.layers, KH = c.kv_heads, D = c.head_dim, n = c.n_tokens, cap = n + 3;
  std::mt19937_64 g(c.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-4, 4);
  auto draw = [&] { return c.data == Data::integer ? float(small(g)) : normal(g); };
  Inputs in;
  in.cpu = std::make_unique<FullKVCache>(L, KH, D, cap, Device::CPU, DType::F32);
  in.dev = std::make_unique<FullKVCache>(L, KH, D, cap, Device::CUDA, dt);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = int32_t(i);
  in.cpu->append_slots(pos.data(), n);
  in.dev->append_slots(pos.data(), n);
  const int64_t nc = n / c.chunk;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<float> k(size_t(n * KH * D)), v(size_t(n * KH * D));  // [n, KH, D]
    for (auto& x : k) x = round_to(draw(), dt);
    for (auto& x : v) x = round_to(normal(g), dt);
    // Exact ties: every 5th chunk repeats the keys of the chunk 3 before it
    // (in every head), so both score it identically.
    for (int64_t ci = 3; ci < nc; ci += 5)
      for (int64_t t = 0; t < c.chunk; ++t)
        std::copy_n(&k[size_t(((ci - 3) * c.chunk + t) * KH * D)], KH * D, &k[size_t((ci * c.chunk + t) * KH * D)]);
    if (n > 0) {
      in.cpu->write(l, 0, k.data(), v.data(), n);
      Tensor hk = Tensor::cpu(DType::F32, {n, KH, D}), hv = Tensor::cpu(DType::F32, {n, KH, D});
      std::copy(k.begin(), k.end(), hk.ptr<float>());
      std::copy(v.begin(), v.end(), hv.ptr<float>());
      in.dev->write(l, 0, to_device_as(hk, Device::CUDA, dt), to_device_as(hv, Device::CUDA, dt));
    }
  }
  in.q.assign(size_t(L), std::vector<float>(size_t(c.heads * D)));
  for (auto& ql : in.q)
    for (auto& x : ql) x = draw();
  return in;
}

ModelConfig config_of(const Case& c) {
  ModelConfig cfg;
  cfg.num_layers = c.layers;
  cfg.num_heads = c.heads;
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  return cfg;
}

// Every byte of the retrieval cache's K and V 0xFF (NaN in f16 and bf16).
void poison(RetrievalKVCache& rc) {
  const FullKVCache& c = rc.cache();
  const size_t bytes = size_t(c.num_layers() * c.num_kv_heads() * c.capacity() * c.head_dim()) * dtype_size(c.dtype());
  const std::vector<uint8_t> ff(bytes, 0xFF);
  copy_bytes(c.layer_k(0).data, Device::CUDA, ff.data(), Device::CPU, bytes);
  copy_bytes(c.layer_v(0).data, Device::CUDA, ff.data(), Device::CPU, bytes);
}

// Device chunk ids against the CPU's: equal for exact data; otherwise
// differences only within rounding of the row's threshold and never across
// an exact tie. Returns the number of rows that differ.
int64_t compare_selection(const RetrievalSelection& dev, const RetrievalSelection& cpu, bool exact,
                          const std::string& what) {
  EXPECT_EQ(dev.num_chunks, cpu.num_chunks) << what;
  EXPECT_EQ(dev.remainder, cpu.remainder) << what;
  EXPECT_TRUE(dev.scores.empty()) << what << ": the device build keeps no scores";
  if (dev.chunks.size() != cpu.chunks.size()) {
    ADD_FAILURE() << what << ": " << dev.chunks.size() << " rows, expected " << cpu.chunks.size();
    return 0;
  }
  if (exact) {
    for (size_t r = 0; r < cpu.chunks.size(); ++r)
      if (dev.chunks[r] != cpu.chunks[r]) {
        ADD_FAILURE() << what << ": row " << r << " selects different chunks";
        return 1;
      }
    return 0;
  }
  int64_t rows_differ = 0;
  for (size_t r = 0; r < cpu.chunks.size(); ++r) {
    const auto& a = cpu.chunks[r];
    const auto& b = dev.chunks[r];
    EXPECT_EQ(a.size(), b.size()) << what;
    EXPECT_TRUE(std::is_sorted(b.begin(), b.end()) && std::adjacent_find(b.begin(), b.end()) == b.end())
        << what << ": row " << r << " not ascending";
    if (!b.empty()) EXPECT_EQ(b[0], 0) << what << ": row " << r << " lacks chunk 0";
    if (a == b) continue;
    ++rows_differ;
    const auto& s = cpu.scores[r];
    // The CPU's threshold: the worst score it kept (chunk 0 aside).
    double thresh = INFINITY, scale = 0;
    for (size_t i = 1; i < a.size(); ++i) thresh = std::min(thresh, s[size_t(a[i])]);
    for (double x : s) scale = std::max(scale, std::abs(x));
    const double tol = 1e-5 * std::max(1.0, scale);
    std::vector<int64_t> only_cpu, only_dev;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_cpu));
    std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_dev));
    for (int64_t c : only_cpu) EXPECT_LE(std::abs(s[size_t(c)] - thresh), tol) << what << " row " << r << " chunk " << c;
    for (int64_t c : only_dev) EXPECT_LE(std::abs(s[size_t(c)] - thresh), tol) << what << " row " << r << " chunk " << c;
    for (int64_t x : only_cpu)
      for (int64_t y : only_dev)
        EXPECT_NE(s[size_t(x)], s[size_t(y)]) << what << " row " << r << ": an exact tie of chunks " << x << " and "
                                              << y << " went the other way";
  }
  return rows_differ;
}

// The device cache's region against the CPU cache's slots picked by `sel`
// (bit for bit; the CPU holds the rounded values), and poison left past it.
void compare_gather(const RetrievalKVCache& rd, const FullKVCache& cpu, const RetrievalSelection& sel, int64_t chunk,
                    int64_t n_tokens, const std::string& what) {
  const FullKVCache& d = rd.cache();
  const int64_t L = d.num_layers(), KH = d.num_kv_heads(), D = d.head_dim(), cap = d.capacity();
  const int64_t region = rd.region(), rem_from = sel.num_chunks * chunk;
  auto& src = const_cast<FullKVCache&>(cpu);
  for (int64_t l = 0; l < L; ++l) {
    const Tensor k = to_host_f32(d.layer_k(l)), v = to_host_f32(d.layer_v(l));
    for (int64_t g = 0; g < KH; ++g) {
      const auto& ch = sel.chunks[size_t(l * KH + g)];
      std::vector<int64_t> slots;
      for (int64_t c : ch)
        for (int64_t t = 0; t < chunk; ++t) slots.push_back(c * chunk + t);
      for (int64_t t = rem_from; t < n_tokens; ++t) slots.push_back(t);
      ASSERT_EQ(int64_t(slots.size()), region) << what;
      for (int64_t j = 0; j < region; ++j) {
        const float* dk = k.ptr<float>() + (g * cap + j) * D;
        const float* dv = v.ptr<float>() + (g * cap + j) * D;
        if (std::memcmp(dk, src.k_at(l, g, slots[size_t(j)]), size_t(D) * 4) != 0 ||
            std::memcmp(dv, src.v_at(l, g, slots[size_t(j)]), size_t(D) * 4) != 0) {
          ADD_FAILURE() << what << ": layer " << l << " head " << g << " slot " << j << " (from " << slots[size_t(j)]
                        << ") differs";
          return;
        }
      }
      if (region < cap) {
        const float* past = k.ptr<float>() + (g * cap + region) * D;
        EXPECT_TRUE(std::isnan(past[0])) << what << ": slot " << region << " written past the region";
      }
    }
  }
}

void run_case(const Case& c, DType dt) {
  const std::string what = c.name() + (dt == DType::F16 ? " f16" : " bf16");
  SCOPED_TRACE(what);
  Inputs in = make_inputs(c, dt);
  RetrievalOptions opt;
  opt.budget = c.budget;
  opt.chunk = c.chunk;
  const int64_t P = c.n_tokens + 1;
  const RetrievalSelection cpu_sel = select_chunks(*in.cpu, c.n_tokens, in.q, c.heads, opt);
  const ModelConfig cfg = config_of(c);
  RetrievalKVCache rd(cfg, opt, 4, c.kv_heads, Device::CUDA, dt);
  poison(rd);
  rd.build_from(*in.dev, P, in.q, c.heads);
  const RetrievalSelection dev_sel = rd.selection();
  const int64_t keep = std::min(c.n_tokens / c.chunk, c.budget / c.chunk);
  EXPECT_EQ(rd.region(), keep * c.chunk + c.n_tokens % c.chunk);
  const int64_t differ = compare_selection(dev_sel, cpu_sel, c.data == Data::integer, what);
  // Near-threshold swaps are rounding accidents: rare, or the scores are wrong.
  EXPECT_LE(differ, std::max<int64_t>(1, c.layers * c.kv_heads / 4)) << what;
  compare_gather(rd, *in.cpu, dev_sel, c.chunk, c.n_tokens, what);
  if (c.data == Data::integer) {
    // The CPU retrieval cache built from the CPU cache holds the same K/V.
    RetrievalKVCache rc(cfg, opt, 4, c.kv_heads);
    rc.build_from(*in.cpu, P, in.q, c.heads);
    EXPECT_EQ(rc.region(), rd.region());
    compare_gather(rd, rc.cache(), [&] {
      // rc's region is its own slots 0..region-1 in order: an identity selection over it.
      RetrievalSelection id;
      id.num_chunks = rc.region() / c.chunk;
      for (size_t r = 0; r < cpu_sel.chunks.size(); ++r) {
        std::vector<int64_t> all;
        for (int64_t i = 0; i < id.num_chunks; ++i) all.push_back(i);
        id.chunks.push_back(all);
      }
      return id;
    }(), c.chunk, rc.region(), what + " vs the CPU retrieval cache");
  }
}

std::vector<Case> shapes() {
  std::vector<Case> out;
  auto add = [&](Case c) { out.push_back(c); };
  for (Data d : {Data::integer, Data::normal}) {
    Case c;
    c.data = d;
    // chunk 8, budget below the prompt; 1027 chunks (not a multiple of 512), remainder 5; MHA
    c.n_tokens = 1027 * 8 + 5, c.chunk = 8, c.budget = 512, c.kv_heads = 2, c.heads = 2, c.seed = 1;
    add(c);
    // GQA 4 query heads per KV head, remainder 0, head_dim 64
    c.n_tokens = 700 * 8, c.kv_heads = 2, c.heads = 8, c.head_dim = 64, c.seed = 2;
    add(c);
    // chunk 16, budget exactly the chunks of the prompt (keep every chunk), remainder 9
    c.n_tokens = 37 * 16 + 9, c.chunk = 16, c.budget = 37 * 16, c.kv_heads = 3, c.heads = 6, c.head_dim = 128, c.seed = 3;
    add(c);
    // budget above the prompt
    c.n_tokens = 20 * 16 + 1, c.budget = 4096, c.seed = 4;
    add(c);
    // chunk 1: every token competes, 3001 candidates for 1023 places
    c.n_tokens = 3001, c.chunk = 1, c.budget = 1024, c.kv_heads = 2, c.heads = 4, c.seed = 5;
    add(c);
    // head_dim 40: 5 vectors a token, the score kernel's generic lane mapping
    c.n_tokens = 513 * 8 + 2, c.chunk = 8, c.budget = 256, c.kv_heads = 1, c.heads = 3, c.head_dim = 40, c.seed = 6;
    add(c);
    // tiny prompts: no full chunk (remainder only), one chunk (chunk 0 only), two chunks with budget one
    c.head_dim = 64, c.kv_heads = 2, c.heads = 2, c.seed = 7;
    c.n_tokens = 5, c.chunk = 8, c.budget = 64;
    add(c);
    c.n_tokens = 8;
    add(c);
    c.n_tokens = 16 + 3, c.budget = 8;
    add(c);
  }
  return out;
}

}  // namespace

TEST(RetrievalSelectGpu, EqualsCpuSelectionAndGather) {
  REQUIRE_DEVICE();
  for (DType dt : {DType::BF16, DType::F16})
    for (const Case& c : shapes()) run_case(c, dt);
}

// Integer data with only a few distinct key patterns: most scores of a row
// tie, so the threshold falls inside a large group of equal scores and the
// lower chunk indices of the group must be the ones kept.
TEST(RetrievalSelectGpu, MassiveTiesGoToLowerChunks) {
  REQUIRE_DEVICE();
  Case c;
  c.data = Data::integer;
  c.n_tokens = 2000 * 8 + 3, c.chunk = 8, c.budget = 800, c.kv_heads = 2, c.heads = 4, c.head_dim = 64;
  for (DType dt : {DType::BF16, DType::F16}) {
    Inputs in = make_inputs(c, dt);
    // Overwrite every chunk with one of 3 patterns (chunk index mod 3), on both copies.
    const int64_t L = c.layers, KH = c.kv_heads, D = c.head_dim;
    for (int64_t l = 0; l < L; ++l)
      for (int64_t g = 0; g < KH; ++g)
        for (int64_t t = 3 * c.chunk; t < (c.n_tokens / c.chunk) * c.chunk; ++t)
          std::copy_n(in.cpu->k_at(l, g, t % (3 * c.chunk)), D, in.cpu->k_at(l, g, t));
    for (int64_t l = 0; l < L; ++l) {
      Tensor hk = Tensor::cpu(DType::F32, {c.n_tokens, KH, D}), hv = Tensor::cpu(DType::F32, {c.n_tokens, KH, D});
      for (int64_t t = 0; t < c.n_tokens; ++t)
        for (int64_t g = 0; g < KH; ++g) {
          std::copy_n(in.cpu->k_at(l, g, t), D, hk.ptr<float>() + (t * KH + g) * D);
          std::copy_n(in.cpu->v_at(l, g, t), D, hv.ptr<float>() + (t * KH + g) * D);
        }
      in.dev->write(l, 0, to_device_as(hk, Device::CUDA, dt), to_device_as(hv, Device::CUDA, dt));
    }
    RetrievalOptions opt;
    opt.budget = c.budget, opt.chunk = c.chunk;
    const RetrievalSelection cpu_sel = select_chunks(*in.cpu, c.n_tokens, in.q, c.heads, opt);
    RetrievalKVCache rd(config_of(c), opt, 4, KH, Device::CUDA, dt);
    poison(rd);
    rd.build_from(*in.dev, c.n_tokens + 1, in.q, c.heads);
    compare_selection(rd.selection(), cpu_sel, true, "massive ties");
    compare_gather(rd, *in.cpu, rd.selection(), c.chunk, c.n_tokens, "massive ties");
  }
}

// An offloaded source (all layers in pinned memory, or the first on chip)
// streams each layer once and selects and gathers exactly what the device cache does.
TEST(RetrievalSelectGpu, OffloadedSourceEqualsDeviceSource) {
  REQUIRE_DEVICE();
  Case c;
  c.layers = 3, c.n_tokens = 900 * 8 + 6, c.chunk = 8, c.budget = 1024, c.kv_heads = 2, c.heads = 4;
  const DType dt = DType::BF16;
  Inputs in = make_inputs(c, dt);
  RetrievalOptions opt;
  opt.budget = c.budget, opt.chunk = c.chunk;
  const ModelConfig cfg = config_of(c);
  RetrievalKVCache ref(cfg, opt, 4, c.kv_heads, Device::CUDA, dt);
  ref.build_from(*in.dev, c.n_tokens + 1, in.q, c.heads);
  for (int64_t on_chip : {int64_t(0), int64_t(1)}) {
    SCOPED_TRACE("on-chip layers " + std::to_string(on_chip));
    FullKVCache off(c.layers, c.kv_heads, c.head_dim, in.dev->capacity(), Device::CUDA, dt, {true, on_chip});
    speculative::copy_prefix(*in.dev, c.n_tokens, off);
    RetrievalKVCache rd(cfg, opt, 4, c.kv_heads, Device::CUDA, dt);
    poison(rd);
    rd.build_from(off, c.n_tokens + 1, in.q, c.heads);
    EXPECT_EQ(rd.selection().chunks, ref.selection().chunks);
    ASSERT_EQ(rd.region(), ref.region());
    for (int64_t l = 0; l < c.layers; ++l) {
      const Tensor a = to_host_f32(rd.cache().layer_k(l)), b = to_host_f32(ref.cache().layer_k(l));
      const Tensor av = to_host_f32(rd.cache().layer_v(l)), bv = to_host_f32(ref.cache().layer_v(l));
      for (int64_t g = 0; g < c.kv_heads; ++g) {
        const size_t at = size_t(g * rd.cache().capacity() * c.head_dim), len = size_t(rd.region() * c.head_dim);
        EXPECT_EQ(std::memcmp(a.ptr<float>() + at, b.ptr<float>() + at, len * 4), 0) << "K layer " << l << " head " << g;
        EXPECT_EQ(std::memcmp(av.ptr<float>() + at, bv.ptr<float>() + at, len * 4), 0) << "V layer " << l << " head " << g;
      }
    }
  }
}

// The CUDA query capture (one device copy per layer, one download) hands back
// each layer's last-row query: close to the CPU model's in f32 (bf16 rounding
// apart), where a wrong layer or row would be off by its whole size.
TEST(RetrievalSelectGpu, CapturedQueryMatchesCpuModel) {
  REQUIRE_DEVICE();
  for (const std::string name : {"gqa_f32", "mha_f32"}) {
    SCOPED_TRACE(name);
    Checkpoint ck = open_checkpoint(kFixtures + "/hf/" + name);
    LlamaWeights w = LlamaWeights::load(*ck.weights, ck.config);
    LlamaModel cpu(ck.config, w, 64);
    LlamaModel gpu(ck.config, upload_weights(w, Device::CUDA, DType::BF16), 64);
    std::vector<int32_t> prompt(150);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % ck.config.vocab_size);
    FullKVCache cc = cpu.make_cache(200), gc = gpu.make_cache(200);
    std::vector<std::vector<float>> qc, qg;
    cpu.forward_capturing_last_query(prompt, cc, 1, qc);
    gpu.forward_capturing_last_query(prompt, gc, 1, qg);
    ASSERT_EQ(qc.size(), qg.size());
    for (size_t l = 0; l < qc.size(); ++l) {
      ASSERT_EQ(qc[l].size(), qg[l].size());
      double err = 0, ref = 0;
      for (size_t i = 0; i < qc[l].size(); ++i) {
        err += (qc[l][i] - qg[l][i]) * (qc[l][i] - qg[l][i]);
        ref += qc[l][i] * qc[l][i];
      }
      EXPECT_LT(std::sqrt(err / std::max(ref, 1e-30)), 0.1) << "layer " << l;
    }
    // A one-token step captures that token's query: the device capture of the
    // step equals a second capture of the same step (rolled back), bit for bit.
    std::vector<std::vector<float>> s1, s2;
    gpu.forward_capturing_last_query({17}, gc, 1, s1);
    gc.truncate(int64_t(prompt.size()));
    gpu.forward_capturing_last_query({17}, gc, 1, s2);
    EXPECT_EQ(s1, s2);
    EXPECT_NE(s1, qg);
  }
}
