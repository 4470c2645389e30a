#include "dist/target_levels.h"

#include "core/check.h"
#include "dist/step_driver.h"
#include "dist/tensor_parallel.h"
#include "spec/retrieval_runner.h"

namespace tf::dist {

void TargetLevel::rebuild(const std::vector<int32_t>&) {
  TF_FAIL("re-retrieval asked of a target level without a retrieval cache");
}

namespace {

class FullLevel : public TargetLevel {
 public:
  FullLevel(LlamaModel& m, int64_t capacity) : r_(m, capacity) {}
  int64_t vocab() const override { return r_.vocab(); }
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override { return r_.logits(seq, n_out); }
  void sync(const std::vector<int32_t>& context) override { r_.sync(context); }
  void reset() override { r_.reset(); }
  void begin(const std::vector<int32_t>& prompt) override { r_.begin(prompt); }

 private:
  spec::ModelRunner r_;
};

class RetrievalLevel : public TargetLevel {
 public:
  RetrievalLevel(LlamaModel& m, const RetrievalOptions& opt, int64_t tail) : r_(m, opt, tail) {}
  int64_t vocab() const override { return r_.vocab(); }
  Tensor logits(const std::vector<int32_t>& seq, int64_t n_out) override { return r_.logits(seq, n_out); }
  void sync(const std::vector<int32_t>& context) override { r_.sync(context); }
  void reset() override { r_.reset(); }
  void begin(const std::vector<int32_t>& prompt) override { r_.begin(prompt); }
  void rebuild(const std::vector<int32_t>& context) override { r_.rebuild(context); }

 private:
  spec::RetrievalRunner r_;
};

}  // namespace

std::unique_ptr<TargetLevel> make_local_level(LlamaModel& model, const LevelSpec& spec) {
  if (spec.kind == LevelSpec::Kind::full) return std::make_unique<FullLevel>(model, spec.capacity);
  return std::make_unique<RetrievalLevel>(model, spec.retrieval, spec.tail_capacity);
}

std::unique_ptr<TargetLevel> TargetLevels::make(const LevelSpec& spec) {
  if (!tp_active()) return make_local_level(*target_, spec);
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

std::unique_ptr<LlamaModel> TargetLevels::layer_skip_draft(const std::string& checkpoint, int64_t K) {
  const ModelConfig& tc = target_->config();
  TF_CHECK(K >= 1 && K <= tc.num_layers, "layer-skip draft: K = " << K << " of " << tc.num_layers << " layers");
  if (!tp_active()) return std::make_unique<LlamaModel>(spec::make_layer_skip_model(*target_, K));
  Checkpoint ck = open_checkpoint(checkpoint);
  ModelConfig c = ck.config;
  c.num_layers = K;  // the loader reads layers [0, K) only
  return std::make_unique<LlamaModel>(c, LlamaWeights::load(*ck.weights, c), target_->max_chunk());
}

}  // namespace tf::dist
