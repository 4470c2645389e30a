// A draft that borrows its target's embedding (config.json
// triforce_shared_embedding, model/shared_embedding.h) and the default-draft
// resolution (speculative/default_draft.h), on the tiny fixture draft of
// tests/fixtures/draft/gqa_f32_draft (made by experiments/draft/make_tiny_draft.py
// for the gqa_f32 target). Every refusal is one line naming the draft.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "model/checkpoint.h"
#include "model/llama.h"
#include "model/shared_embedding.h"
#include "speculative/default_draft.h"
#include "speculative/methods.h"
#include "test_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tf;
using tf::testing::expect_throws_naming;

namespace {

const fs::path kFixtures = TF_FIXTURES;
const fs::path kDraft = kFixtures / "draft" / "gqa_f32_draft";
const fs::path kTarget = kFixtures / "hf" / "gqa_f32";

std::unique_ptr<LlamaModel> load_model(const fs::path& p) {
  Checkpoint ck = open_checkpoint(p.string());
  return std::make_unique<LlamaModel>(ck.config, LlamaWeights::load(*ck.weights, ck.config));
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// A copy of the fixture draft with its config.json edited by `edit`.
template <class F> fs::path draft_with(const std::string& name, F&& edit) {
  const fs::path d = tf::testing::tmp_dir("tf_shared_embedding") / name;
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy(kDraft / "model.safetensors", d / "model.safetensors");
  json c = read_json(kDraft / "config.json");
  edit(c);
  std::ofstream(d / "config.json") << c.dump(2);
  return d;
}

struct EnvGuard {  // sets TRIFORCE_DEFAULT_DRAFT for one test
  explicit EnvGuard(const std::string& v) { setenv("TRIFORCE_DEFAULT_DRAFT", v.c_str(), 1); }
  ~EnvGuard() { unsetenv("TRIFORCE_DEFAULT_DRAFT"); }
};

}  // namespace

TEST(SharedEmbedding, ConfigMarkerParsed) {
  const ModelConfig c = config_from_hf_json((kDraft / "config.json").string());
  ASSERT_TRUE(c.shared_embedding.enabled);
  EXPECT_EQ(c.shared_embedding.fingerprint_rows.size(), c.shared_embedding.fingerprint_norms.size());
  EXPECT_FALSE(c.shared_embedding.target.empty());
  // Its weights do not count the borrowed embedding; its own layers do.
  ModelConfig owned = c;
  owned.shared_embedding.enabled = false;
  EXPECT_EQ(owned.param_count() - c.param_count(), c.vocab_size * c.hidden_size);
}

TEST(SharedEmbedding, ConfigMarkerRefusals) {
  const std::string src = (kDraft / "config.json").string();
  const json base = read_json(src);
  auto expect = [&](auto&& edit, const std::string& rule) {
    json c = base;
    edit(c);
    expect_throws_naming([&] { config_from_hf_json_text(c.dump(), src); }, src, rule);
  };
  const std::string M = "triforce_shared_embedding";
  expect([&](json& c) { c[M] = true; }, "must be an object");
  expect([&](json& c) { c[M]["extra"] = 1; }, "unknown key 'extra'");
  expect([&](json& c) { c[M]["tensor"] = "lm_head.weight"; }, ".tensor must be");
  expect([&](json& c) { c[M]["target"] = json::object(); }, ".target must be an object");
  expect([&](json& c) { c[M]["target"]["num_experts"] = 8; }, "unknown field 'num_experts'");
  expect([&](json& c) { c[M]["target"]["hidden_size"] = "96"; }, "must be a number");
  expect([&](json& c) { c[M]["fingerprint_norms"].erase(0); }, "two non-empty lists of one length");
  expect([&](json& c) { c[M]["fingerprint_norms"][0] = -1.0; }, "must be a positive number");
  expect([&](json& c) { c[M]["fingerprint_rows"][0] = 100000; }, "outside the vocabulary");
  expect([&](json& c) { c["tie_word_embeddings"] = false; }, "needs tie_word_embeddings true");
}

TEST(SharedEmbedding, CheckpointExpectsNoEmbedding) {
  const Checkpoint ck = open_checkpoint(kDraft.string());  // no model.embed_tokens.weight, and none expected
  EXPECT_FALSE(ck.weights->has("model.embed_tokens.weight"));
  const LlamaWeights w = LlamaWeights::load(*ck.weights, ck.config);
  EXPECT_EQ(w.embed.data, nullptr);
  EXPECT_EQ(w.lm_head.data, nullptr);
  // Without the marker the missing embedding is an error that names the marker.
  const fs::path unmarked = draft_with("unmarked", [](json& c) { c.erase("triforce_shared_embedding"); });
  expect_throws_naming([&] { open_checkpoint(unmarked.string()); }, unmarked.string(),
                       "missing tensor model.embed_tokens.weight");
  expect_throws_naming([&] { open_checkpoint(unmarked.string()); }, unmarked.string(), "triforce_shared_embedding");
  // The marker on a checkpoint that stores an embedding: which one is meant?
  const fs::path both = tf::testing::tmp_dir("tf_shared_embedding") / "with_embedding";
  fs::remove_all(both);
  fs::create_directories(both);
  fs::copy(kFixtures / "hf" / "tied_f32" / "model.safetensors", both / "model.safetensors");
  json c = read_json(kFixtures / "hf" / "tied_f32" / "config.json");
  c["triforce_shared_embedding"] = read_json(kDraft / "config.json")["triforce_shared_embedding"];
  c["triforce_shared_embedding"]["target"] = {{"vocab_size", 256}};
  std::ofstream(both / "config.json") << c.dump(2);
  expect_throws_naming([&] { open_checkpoint(both.string()); }, "model.safetensors",
                       "model.embed_tokens.weight is present but config.json says the embedding is borrowed");
}

TEST(SharedEmbedding, DraftBorrowsTheTargetsTensor) {
  auto target = load_model(kTarget);
  speculative::DraftModels drafts;
  LlamaModel& d = drafts.get(kDraft.string(), *target);
  // The target's own storage, no copy; the whole vocabulary even though the target's head is separate.
  EXPECT_EQ(d.weights().embed.data, target->weights().embed.data);
  EXPECT_EQ(d.weights().lm_head.data, target->weights().embed.data);
  EXPECT_EQ(d.weights().lm_head.dim(0), target->config().vocab_size);
  FullKVCache cache = d.make_cache(8);
  const Tensor logits = d.forward({1, 5, 9, 200}, cache);
  EXPECT_EQ(logits.shape, (std::vector<int64_t>{4, target->config().vocab_size}));
}

TEST(SharedEmbedding, DraftRefusals) {
  auto target = load_model(kTarget);
  auto expect = [&](const fs::path& d, const std::string& rule) {
    speculative::DraftModels drafts;
    expect_throws_naming([&] { drafts.get(d.string(), *target); }, d.string(), rule);
  };
  expect(draft_with("vocab", [](json& c) { c["vocab_size"] = 512; }), "vocabulary of 512 tokens");
  expect(draft_with("trained_for", [](json& c) { c["triforce_shared_embedding"]["target"]["num_hidden_layers"] = 30; }),
         "trained for a target with num_hidden_layers = 30, this target has 2");
  expect(draft_with("fingerprint", [](json& c) { c["triforce_shared_embedding"]["fingerprint_norms"][2] = 123.0; }),
         "trained on another model's embedding");
  // Another target of the right vocabulary but another width.
  auto narrow = load_model(kFixtures / "hf" / "mha_f32");
  speculative::DraftModels drafts;
  expect_throws_naming([&] { drafts.get(kDraft.string(), *narrow); }, kDraft.string(), "has hidden size 96, the target 64");
}

TEST(SharedEmbedding, ShardedTargetLendsItsWholeEmbedding) {
  // A tensor-parallel rank holds a vocab slice of the head but the whole embedding: the draft gets all of it.
  Checkpoint ck = open_checkpoint(kTarget.string());
  LlamaWeights shard = LlamaWeights::load(*ck.weights, ck.config, ShardSpec{1, 2});
  ASSERT_LT(shard.lm_head.dim(0), ck.config.vocab_size);
  Checkpoint dk = open_checkpoint(kDraft.string());
  LlamaWeights w = LlamaWeights::load(*dk.weights, dk.config);
  borrow_target_embedding(w, dk.config, kDraft.string(), ck.config, shard);
  EXPECT_EQ(w.lm_head.dim(0), ck.config.vocab_size);
  EXPECT_EQ(w.embed.data, shard.embed.data);
}

TEST(DefaultDraft, Resolution) {
  auto target = load_model(kTarget);
  auto other = load_model(kFixtures / "hf" / "mha_f32");
  {
    EnvGuard e(kDraft.string());
    const speculative::DefaultDraft d = speculative::default_draft(*target);
    EXPECT_EQ(d.choice, "trained");
    EXPECT_EQ(d.draft, kDraft.string());
    const speculative::DefaultDraft o = speculative::default_draft(*other);  // not the model it was trained for
    EXPECT_EQ(o.choice, "layerskip");
    EXPECT_EQ(o.draft, "layerskip:1");
    // resolve() puts it at the bottom of the named methods, and says so.
    speculative::MethodRequest req;
    req.method = "triforce";
    const speculative::ResolvedMethod r = speculative::resolve(*target, req, 64);
    EXPECT_EQ(r.chain.levels[0].source, speculative::LevelSpec::Source::model);
    EXPECT_EQ(r.chain.levels[0].path, kDraft.string());
    EXPECT_EQ(r.draft_choice, "trained");
    req.draft = "layerskip:1";
    EXPECT_EQ(speculative::resolve(*target, req, 64).draft_choice, "given");
  }
  {
    EnvGuard e("none");
    EXPECT_EQ(speculative::default_draft(*target).choice, "layerskip");
  }
  {
    EnvGuard e((kFixtures / "no_such_draft").string());
    expect_throws_naming([&] { speculative::default_draft(*target); }, "no_such_draft", "TRIFORCE_DEFAULT_DRAFT");
  }
  {
    EnvGuard e((kFixtures / "hf" / "mha_f32").string());  // a checkpoint, but not a borrowing draft
    expect_throws_naming([&] { speculative::default_draft(*target); }, "mha_f32", "no triforce_shared_embedding");
  }
}
