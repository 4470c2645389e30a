#include "parallel/target_levels.h"

#include "core/check.h"
#include "parallel/step_driver.h"
#include "parallel/tensor_parallel.h"
#include "model/weights_device.h"
#include "speculative/retrieval_runner.h"
#include "speculative/streaming_runner.h"

namespace tf::parallel {

void TargetLevel::rebuild(const std::vector<int32_t>&) {
  TF_FAIL("re-retrieval asked of a target level without a retrieval cache");
}

void TargetLevel::rebuild_from(const std::vector<int32_t>&, TargetLevel&) {
  TF_FAIL("re-retrieval asked of a target level without a retrieval cache");
}

namespace {

class FullLevel : public TargetLevel {
 public:
  FullLevel(LlamaModel& m, int64_t capacity) : r_(m, capacity) {}
  FullLevel(LlamaModel& m, FullKVCache cache, const std::vector<int32_t>& tokens) : r_(m, std::move(cache), tokens) {}
  int64_t vocab() const override { return r_.vocab(); }
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override { return r_.logits(seq, n_out); }
  void greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) override {
    r_.greedy_ids(seq, n_out, ids);
  }
  bool distributions_on_device() const override { return r_.distributions_on_device(); }
  void device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                            Tensor& rows) override {
    r_.device_distributions(seq, n_out, sp, rows);
  }
  void sync(const std::vector<int32_t>& context) override { r_.sync(context); }
  void reset() override { r_.reset(); }
  void begin(const std::vector<int32_t>& prompt) override { r_.begin(prompt); }
  void seed(const speculative::PrefillSnapshot& snap, int64_t n) override {
    TF_CHECK(n >= 0 && n <= int64_t(snap.prompt().size()),
             "target level: seeded with " << n << " tokens of a " << snap.prompt().size() << "-token prefill");
    r_.load_prefix(snap.cache(), std::vector<int32_t>(snap.prompt().begin(), snap.prompt().begin() + n));
  }
  speculative::ModelRunner* full_runner() override { return &r_; }

 private:
  speculative::ModelRunner r_;
};

class RetrievalLevel : public TargetLevel {
 public:
  RetrievalLevel(LlamaModel& m, const RetrievalOptions& opt, int64_t tail) : r_(m, opt, tail) {}
  int64_t vocab() const override { return r_.vocab(); }
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override { return r_.logits(seq, n_out); }
  void greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) override {
    r_.greedy_ids(seq, n_out, ids);
  }
  bool distributions_on_device() const override { return r_.distributions_on_device(); }
  void device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                            Tensor& rows) override {
    r_.device_distributions(seq, n_out, sp, rows);
  }
  void sync(const std::vector<int32_t>& context) override { r_.sync(context); }
  void reset() override { r_.reset(); }
  void begin(const std::vector<int32_t>& prompt) override { r_.begin(prompt); }
  void seed(const speculative::PrefillSnapshot& snap, int64_t) override {
    r_.begin_from(snap.prompt(), snap.cache(), snap.last_query());
  }
  void rebuild(const std::vector<int32_t>& context) override { r_.rebuild(context); }
  void rebuild_from(const std::vector<int32_t>& context, TargetLevel& top) override {
    speculative::ModelRunner* full = top.full_runner();
    TF_CHECK(full, "re-retrieval: the level to rebuild from is not a full target level");
    full->last_query(context, q_);
    r_.begin_from(context, full->cache(), q_);
  }

 private:
  speculative::RetrievalRunner r_;
  std::vector<std::vector<float>> q_;
};

class StreamingLevel : public TargetLevel {
 public:
  StreamingLevel(LlamaModel& m, int64_t sink, int64_t window, int64_t max_tail) : r_(m, sink, window, max_tail) {}
  int64_t vocab() const override { return r_.vocab(); }
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override { return r_.logits(seq, n_out); }
  void greedy_ids(const std::vector<int32_t>& seq, int64_t n_out, std::vector<int32_t>& ids) override {
    r_.greedy_ids(seq, n_out, ids);
  }
  bool distributions_on_device() const override { return r_.distributions_on_device(); }
  void device_distributions(const std::vector<int32_t>& seq, int64_t n_out, const SamplingParams& sp,
                            Tensor& rows) override {
    r_.device_distributions(seq, n_out, sp, rows);
  }
  void sync(const std::vector<int32_t>& context) override { r_.sync(context); }
  void reset() override { r_.reset(); }
  void begin(const std::vector<int32_t>& prompt) override { r_.begin(prompt); }
  void seed(const speculative::PrefillSnapshot& snap, int64_t) override { r_.begin_from(snap.prompt(), snap.cache()); }

 private:
  speculative::StreamingRunner r_;
};

}  // namespace

std::unique_ptr<TargetLevel> make_local_level(LlamaModel& model, const LevelSpec& spec) {
  switch (spec.kind) {
    case LevelSpec::Kind::full: return std::make_unique<FullLevel>(model, spec.capacity);
    case LevelSpec::Kind::retrieval:
      return std::make_unique<RetrievalLevel>(model, spec.retrieval, spec.tail_capacity);
    case LevelSpec::Kind::streaming:
      return std::make_unique<StreamingLevel>(model, spec.sink, spec.window, spec.tail_capacity);
  }
  TF_FAIL("target level: unknown kind");
}

bool TargetLevels::driven() const { return tp_driven() && !is_worker(); }

std::unique_ptr<TargetLevel> TargetLevels::make(const LevelSpec& spec) {
  if (!tp_driven()) return make_local_level(*target_, spec);
  TF_CHECK(!is_worker(), "target levels are built on rank 0; workers mirror them");
  return std::make_unique<DrivenLevel>(step_driver(), *target_, spec);
}

std::unique_ptr<TargetLevel> TargetLevels::full(int64_t capacity) {
  LevelSpec s;
  s.kind = LevelSpec::Kind::full;
  s.capacity = capacity;
  return make(s);
}

std::unique_ptr<TargetLevel> TargetLevels::retrieval(const RetrievalOptions& opt, int64_t tail_capacity) {
  LevelSpec s;
  s.kind = LevelSpec::Kind::retrieval;
  s.retrieval = opt;
  s.tail_capacity = tail_capacity;
  return make(s);
}

std::unique_ptr<TargetLevel> TargetLevels::streaming(int64_t sink, int64_t window, int64_t max_tail) {
  LevelSpec s;
  s.kind = LevelSpec::Kind::streaming;
  s.sink = sink;
  s.window = window;
  s.tail_capacity = max_tail;
  return make(s);
}

std::unique_ptr<TargetLevel> TargetLevels::full_adopting(FullKVCache cache, const std::vector<int32_t>& tokens) {
  TF_CHECK(!tp_driven(), "target levels: a driven level cannot adopt a cache (its mirrors have their own)");
  return std::make_unique<FullLevel>(*target_, std::move(cache), tokens);
}

std::unique_ptr<speculative::PrefillSnapshot> TargetLevels::snapshot(const std::vector<int32_t>& prompt,
                                                              const speculative::PhaseClock& clock, int64_t capacity) {
  if (!tp_driven()) return std::make_unique<speculative::PrefillSnapshot>(*target_, prompt, clock, capacity);
  TF_CHECK(!is_worker(), "prefill snapshots are taken on rank 0; workers mirror them");
  return std::make_unique<DrivenSnapshot>(step_driver(), *target_, prompt, clock);
}

std::unique_ptr<LlamaModel> TargetLevels::layer_skip_draft(const std::string& checkpoint, int64_t K) {
  const ModelConfig& tc = target_->config();
  TF_CHECK(K >= 1 && K <= tc.num_layers, "layer-skip draft: K = " << K << " of " << tc.num_layers << " layers");
  if (!driven()) return std::make_unique<LlamaModel>(speculative::make_layer_skip_model(*target_, K));
  TF_CHECK(!checkpoint.empty(), "layerskip:" << K << " under --tp-mode driven: rank 0 reads the draft whole from "
                                             << "the target's checkpoint, and none was given");
  if (is_synthetic_path(checkpoint)) {
    // The synthetic weights draw each tensor's numbers in a fixed order, embedding and head
    // first, then layer by layer: a K-layer model made whole is the target's first K layers.
    ModelConfig c = synthetic_config(checkpoint);
    c.num_layers = K;
    return std::make_unique<LlamaModel>(c, synthetic_weights(c, target_->device(), target_->dtype()),
                                        target_->max_chunk());
  }
  Checkpoint ck = open_checkpoint(checkpoint);
  ModelConfig c = ck.config;
  c.num_layers = K;  // the loader reads layers [0, K) only
  LlamaWeights w = LlamaWeights::load(*ck.weights, c);
  // The draft runs where the target runs, in the target's dtype (as DraftModels does for model:PATH).
  if (target_->device() != Device::CPU) w = upload_weights(w, target_->device(), target_->dtype());
  return std::make_unique<LlamaModel>(c, std::move(w), target_->max_chunk());
}

}  // namespace tf::parallel
