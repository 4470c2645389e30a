// The sweep's grid, shards, results file, lock and merge (no model runs: the
// CLI tests run real sweeps).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "io/h5_file.h"
#include "io/npy.h"
#include "sweep/grid.h"
#include "sweep/lock.h"
#include "sweep/merge.h"
#include "sweep/prompts.h"
#include "sweep/results.h"
#include "sweep/runner.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace tf::sweep;
using tf::testing::expect_throws_naming;
using tf::testing::tmp_dir;

namespace {

GridSpec small_grid() {
  GridSpec g;
  g.methods = {"spec", "triforce", "ngram-triforce"};
  g.drafts = {"layerskip:1", "ngram:2"};
  g.contexts = {64, 128};
  g.max_new = {16};
  g.budgets = {16, 32};
  g.chunks = {8};
  g.gamma1 = {2};
  g.gamma2 = {4, 6};
  g.temperatures = {0};
  g.top_ps = {1};
  g.seeds = {0, 1};
  g.n_prompts = 2;
  return g;
}

std::vector<std::string> names2() { return {"a", "b"}; }

RunRecord record(int64_t index, const std::string& key, double dec_ms, std::vector<int32_t> tokens) {
  RunRecord r;
  r.index = index;
  r.attrs = {{"key", key},           {"method", std::string("ar")}, {"context", int64_t(64)},
             {"budget", int64_t(-1)}, {"decode_ms_per_token", dec_ms}, {"e2e_ms_per_token", dec_ms * 2},
             {"alpha_l1", 0.5}};
  r.datasets.push_back({"tokens", tokens, "token id"});
  r.datasets.push_back({"steps/drafted_l1", std::vector<int32_t>{4, 4}, "tokens"});
  r.datasets.push_back({"accepted_hist_l1", std::vector<int64_t>{1, 0, 1}, "steps"});
  return r;
}

FileHeader header(const std::string& config = "method = ar\n") {
  FileHeader h;
  h.config = config;
  h.root = {{"git_sha", std::string("abc")}, {"world_size", int64_t(1)}};
  return h;
}

}  // namespace

TEST(SweepGrid, ListsAndRanges) {
  EXPECT_EQ(parse_int_list("budget", "16, 32,64"), (std::vector<int64_t>{16, 32, 64}));
  EXPECT_EQ(parse_int_list("context", "256:1024:256"), (std::vector<int64_t>{256, 512, 768, 1024}));
  EXPECT_EQ(parse_real_list("temperature", "0,0.6"), (std::vector<double>{0, 0.6}));
  expect_throws_naming([] { parse_int_list("budget", "16,x"); }, "", "--budget");
  expect_throws_naming([] { parse_int_list("context", "1024:256:256"); }, "", "--context");
  expect_throws_naming([] { Shard::parse("3/3"); }, "", "--shard");
  EXPECT_EQ(Shard::parse("1/4").count, 4);
}

TEST(SweepGrid, ArOncePerUnitAndParametersAMethodIgnoresCollapse) {
  const auto pts = expand(small_grid());
  // units: 2 prompts x 2 contexts x 2 seeds = 8; per unit: ar 1 + spec 2 drafts
  // + triforce 2 drafts x 2 budgets x 2 gamma2 = 8 + ngram-triforce (ngram:2 only) 2 x 2 = 4.
  ASSERT_EQ(pts.size(), size_t(8 * (1 + 2 + 8 + 4)));
  std::set<std::string> keys;
  std::map<int64_t, int64_t> ar_per_unit;
  for (size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    EXPECT_EQ(p.index, int64_t(i));
    EXPECT_TRUE(keys.insert(p.key(names2())).second) << p.key(names2());
    if (p.is_baseline()) {
      ++ar_per_unit[p.unit];
      EXPECT_EQ(p.budget, -1);
      EXPECT_EQ(p.draft, "");
    }
    // The baseline precedes its points and shares everything but the method's parameters.
    const auto& b = pts[size_t(p.baseline)];
    EXPECT_TRUE(b.is_baseline());
    EXPECT_LE(b.index, p.index);
    EXPECT_EQ(b.unit, p.unit);
    EXPECT_EQ(b.context, p.context);
    EXPECT_EQ(b.seed, p.seed);
    if (p.method == "ngram-triforce") {
      EXPECT_EQ(p.draft, "ngram:2");
      EXPECT_EQ(p.sink, -1);
    }
    if (p.method == "spec") EXPECT_EQ(p.gamma2, -1);
  }
  for (const auto& [u, n] : ar_per_unit) EXPECT_EQ(n, 1) << "unit " << u;
  EXPECT_EQ(ar_per_unit.size(), 8u);
  // Same config -> same grid.
  const auto again = expand(small_grid());
  for (size_t i = 0; i < pts.size(); ++i) EXPECT_EQ(pts[i].key(names2()), again[i].key(names2()));
}

TEST(SweepGrid, ShardsPartitionWholeUnits) {
  const auto pts = expand(small_grid());
  for (int64_t n : {1, 2, 3, 5, 8, 11}) {
    std::set<int64_t> seen;
    std::map<int64_t, int64_t> shard_of_unit;
    for (int64_t i = 0; i < n; ++i) {
      for (const auto& p : select_shard(pts, Shard{i, n})) {
        EXPECT_TRUE(seen.insert(p.index).second) << "point " << p.index << " in two shards";
        auto [it, fresh] = shard_of_unit.emplace(p.unit, i);
        EXPECT_EQ(it->second, i) << "unit " << p.unit << " split across shards";
      }
    }
    EXPECT_EQ(seen.size(), pts.size()) << n << " shards";
  }
}

TEST(SweepResults, AppendResumeAndRefuse) {
  const std::string path = (tmp_dir("sweep") / "r.h5").string();
  fs::remove(path);
  {
    ResultsWriter w(path, header());
    EXPECT_TRUE(w.completed().empty());
    w.append(record(0, "k0", 10.0, {1, 2, 3}));
    w.append(record(3, "k3", 5.0, {4}));
    expect_throws_naming([&] { w.append(record(4, "k3", 5.0, {4})); }, path, "already");
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  {
    ResultsWriter w(path, header());  // resume
    ASSERT_EQ(w.completed().size(), 2u);
    EXPECT_EQ(w.completed().at("k0").tokens, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_DOUBLE_EQ(w.completed().at("k3").decode_ms_per_token, 5.0);
    w.append(record(5, "k5", 1.0, {}));
  }
  expect_throws_naming([&] { ResultsWriter w(path, header("method = spec\n")); }, path, "different sweep config");
  auto f = tf::h5::open_file(path, false);
  check_schema(f, path);
  EXPECT_EQ(tf::h5::get_string_attr(f, "git_sha"), "abc");
  auto runs = read_completed(f, path);
  ASSERT_EQ(runs.size(), 3u);
  auto g = tf::h5::open_group(f, "/runs/000003");
  EXPECT_EQ(tf::h5::get_string_attr(g, "key"), "k3");
  EXPECT_DOUBLE_EQ(tf::h5::get_real_attr(g, "alpha_l1"), 0.5);
  EXPECT_EQ(tf::h5::read_int_vector(g, "steps/drafted_l1"), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(tf::h5::get_string_attr(tf::h5::open_group(f, "/runs/000003").id(), "key"), "k3");
}

TEST(SweepResults, NotASweepFile) {
  const std::string path = (tmp_dir("sweep") / "plain.h5").string();
  { auto f = tf::h5::create_file(path); }
  expect_throws_naming([&] { ResultsWriter w(path, header()); }, path, "not a triforce sweep file");
}

TEST(SweepLock, SecondWriterRefused) {
  const std::string path = (tmp_dir("sweep") / "locked.h5").string();
  FileLock a(path);
  expect_throws_naming([&] { FileLock b(path); }, path, "another sweep");
}

TEST(SweepMerge, KeepsShardsRefusesDuplicatesAndConflicts) {
  const auto dir = tmp_dir("sweep");
  const std::string s0 = (dir / "s0.h5").string(), s1 = (dir / "s1.h5").string(), out = (dir / "m.h5").string();
  const std::string dup = (dir / "dup.h5").string(), other = (dir / "other.h5").string();
  for (const auto& p : {s0, s1, dup, other, out}) fs::remove(p);
  {
    FileHeader h = header();
    h.root.emplace_back("shard", std::string("0/2"));
    ResultsWriter w(s0, h);
    w.append(record(0, "k0", 1, {1}));
    w.append(record(1, "k1", 1, {2}));
  }
  {
    FileHeader h = header();
    h.root.emplace_back("shard", std::string("1/2"));
    ResultsWriter w(s1, h);
    w.append(record(2, "k2", 1, {3}));
  }
  const MergeStats st = merge_files(out, {s1, s0});
  EXPECT_EQ(st.runs, 3);
  {
    auto f = tf::h5::open_file(out, false);
    check_schema(f, out);
    EXPECT_EQ(read_completed(f, out).size(), 3u);
    EXPECT_EQ(tf::h5::get_string_attr(f, "git_sha"), "abc");  // equal in every shard: kept at the root
    EXPECT_FALSE(tf::h5::has_attr(f, "shard"));                // differs: only per shard
    EXPECT_EQ(tf::h5::get_string_attr(tf::h5::open_group(f, "/shards/0").id(), "shard"), "1/2");
    EXPECT_EQ(tf::h5::get_string_attr(tf::h5::open_group(f, "/shards/1").id(), "file"), s0);
  }
  {
    ResultsWriter w(dup, header());
    w.append(record(7, "k1", 1, {2}));
  }
  expect_throws_naming([&] { merge_files(out, {s0, dup}); }, dup, "duplicate run");
  {
    ResultsWriter w(other, header());
    w.append(record(1, "k9", 1, {2}));
  }
  expect_throws_naming([&] { merge_files(out, {s0, other}); }, other, "conflicting runs at grid index 1");
  fs::remove(other);
  {
    ResultsWriter w(other, header("method = spec\n"));
  }
  expect_throws_naming([&] { merge_files(out, {s0, other}); }, other, "conflicting /config");
  EXPECT_EQ(check_files({out}, false), 3);
}

TEST(SweepPrompts, TokenArraysAndCuts) {
  const auto dir = tmp_dir("sweep");
  std::vector<int32_t> rows(2 * 10);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
  const std::string npy = (dir / "p.npy").string();
  tf::write_npy_i32(npy, rows.data(), {2, 10});
  const std::string h5 = (dir / "p.h5").string();
  {
    auto f = tf::h5::create_file(h5);
    tf::h5::write_vector(f, "/prompts/one", std::vector<int32_t>{7, 8, 9, 10, 11});
  }
  PromptSources src;
  src.tokens = {npy, h5 + ":/prompts/one"};
  PromptSet ps(src);
  ASSERT_EQ(ps.size(), 3);
  EXPECT_EQ(ps.names(), (std::vector<std::string>{"p#0", "p#1", "p"}));
  EXPECT_FALSE(ps.needs_tokenizer());
  EXPECT_EQ(ps.cut(1, 3, nullptr), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(ps.cut(2, 5, nullptr), (std::vector<int32_t>{7, 8, 9, 10, 11}));
  expect_throws_naming([&] { ps.cut(2, 6, nullptr); }, h5, "context 6");
  src.tokens = {npy, npy};
  expect_throws_naming([&] { PromptSet again(src); }, npy, "unique");
  PromptSources none;
  none.sets = {"default"};
  none.set_dir = (dir / "empty").string();
  expect_throws_naming([&] { PromptSet s(none); }, "empty", "make_default_prompts.sh");
  EXPECT_NE(token_hash({1, 2}), token_hash({2, 1}));
}

TEST(SweepGrid, EachMethodGetsItsOwnGammas) {
  GridSpec g;
  g.methods = {"spec", "retrieval", "streaming-hier", "triforce"};
  g.drafts = {"layerskip:1"};
  g.contexts = {64};
  g.max_new = {8};
  g.budgets = {16};
  g.chunks = {8};
  g.gamma1 = {3};
  g.gamma2 = {5};
  g.sinks = {4};
  g.windows = {12};
  g.temperatures = {0};
  g.top_ps = {1};
  g.seeds = {0};
  std::map<std::string, Point> by_method;
  for (const auto& p : expand(g)) by_method[p.method] = p;
  ASSERT_EQ(by_method.size(), 5u);
  EXPECT_TRUE(method_request(by_method["ar"], {}).gammas.empty());
  EXPECT_EQ(method_request(by_method["spec"], {}).gammas, (std::vector<int64_t>{3}));
  // retrieval's only drafting level is the retrieval cache: its block is gamma2.
  EXPECT_EQ(by_method["retrieval"].draft, "");
  EXPECT_EQ(by_method["retrieval"].sink, -1);
  EXPECT_EQ(method_request(by_method["retrieval"], {}).gammas, (std::vector<int64_t>{5}));
  EXPECT_EQ(by_method["streaming-hier"].chunk, -1);
  EXPECT_EQ(method_request(by_method["streaming-hier"], {}).gammas, (std::vector<int64_t>{3, 5}));
  const auto r = method_request(by_method["triforce"], {2});
  EXPECT_EQ(r.gammas, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(r.budget, 16);
  EXPECT_EQ(r.window, 12);
  EXPECT_EQ(r.stop_ids, (std::vector<int64_t>{2}));
}
