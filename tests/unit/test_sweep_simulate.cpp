// The sweep's simulate-acceptance grid key: per-level tuples with '|'
// alternatives and 'none'; each tuple goes to the methods with that many
// verifying levels, ar never; simulated keys differ from real ones (a real
// key is unchanged), so resume and merge keep them apart; the run record
// carries the rates and does not compare simulated tokens with ar's.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "io/h5_file.h"
#include "sweep/grid.h"
#include "sweep/merge.h"
#include "sweep/results.h"
#include "sweep/runner.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace tf::sweep;
using tf::testing::expect_throws_naming;
using tf::testing::tmp_dir;

namespace {

GridSpec grid(std::vector<std::string> methods, std::vector<std::string> sims) {
  GridSpec g;
  g.methods = std::move(methods);
  g.contexts = {64};
  g.max_new = {8};
  g.temperatures = {0};
  g.top_ps = {1};
  g.seeds = {0};
  g.simulate_acceptance = std::move(sims);
  return g;
}

const std::vector<std::string> kNames = {"p"};

}  // namespace

TEST(SweepSimulate, ListSyntax) {
  EXPECT_EQ(parse_simulate_list("simulate-acceptance", "0.2|0.5/0.9|0.98, none, 0.35/0.9137, 0.20/0.9, none"),
            (std::vector<std::string>{"0.2/0.9", "0.2/0.98", "0.5/0.9", "0.5/0.98", "", "0.35/0.9137"}));
  EXPECT_EQ(parse_simulate_list("simulate-acceptance", "0.9, 1, 0"), (std::vector<std::string>{"0.9", "1", "0"}));
  for (const char* bad : {"0.2/x", "1.2/0.9", "0.2/", "0.2||0.3/0.9", "0.5/-0.1", "nothing"})
    expect_throws_naming([&] { parse_simulate_list("simulate-acceptance", bad); }, "", "--simulate-acceptance");
}

TEST(SweepSimulate, TuplesGoToMethodsByLevelCountArNever) {
  const auto pts = expand(grid({"spec", "triforce"}, {"0.9", "0.3/0.9", "0.5/0.95", ""}));
  // ar 1 + spec (0.9, real) 2 + triforce (two tuples, real) 3.
  ASSERT_EQ(pts.size(), 6u);
  std::set<std::string> keys;
  for (const auto& p : pts) {
    EXPECT_TRUE(keys.insert(p.key(kNames)).second) << p.key(kNames);
    const bool sim = !p.simulate_acceptance.empty();
    EXPECT_EQ(p.key(kNames).find("simulate_acceptance") != std::string::npos, sim) << p.key(kNames);
    if (p.method == "ar") EXPECT_FALSE(sim);
    if (p.method == "spec" && sim) EXPECT_EQ(p.simulate_acceptance, "0.9");
    if (p.method == "triforce" && sim) EXPECT_NE(p.simulate_acceptance.find('/'), std::string::npos);
  }
  // A real point's key is the key it had before the option existed.
  const auto real = expand(grid({"spec", "triforce"}, {}));
  ASSERT_EQ(real.size(), 3u);
  std::set<std::string> real_keys;
  for (const auto& p : real) real_keys.insert(p.key(kNames));
  for (const auto& p : pts)
    if (p.simulate_acceptance.empty()) EXPECT_TRUE(real_keys.count(p.key(kNames))) << p.key(kNames);
  // Simulated only: no real triforce run, still the real ar baseline.
  const auto only = expand(grid({"triforce"}, {"0.3/0.9"}));
  ASSERT_EQ(only.size(), 2u);
  EXPECT_EQ(only[0].method, "ar");
  EXPECT_EQ(only[1].simulate_acceptance, "0.3/0.9");
  EXPECT_EQ(only[1].baseline, 0);
  expect_throws_naming([] { expand(grid({"triforce"}, {"0.9"})); }, "", "--simulate-acceptance");
  expect_throws_naming([] { expand(grid({"spec", "triforce"}, {"0.1/0.2/0.3", "none"})); }, "",
                       "--simulate-acceptance");
  // The request and the record of a simulated point.
  const Point& p = only[1];
  const tf::speculative::MethodRequest req = method_request(p, {});
  EXPECT_EQ(req.simulate_acceptance, (std::vector<double>{0.3, 0.9}));
  EXPECT_TRUE(method_request(only[0], {}).simulate_acceptance.empty());
  tf::speculative::MethodOutcome o;
  o.method = "triforce";
  o.tokens = {1, 2, 3};
  o.decode_ms_per_token = 1;
  CompletedRun ar;
  ar.tokens = {1, 2, 3};
  ar.decode_ms_per_token = 2;
  const RunRecord rec = make_record(p, kNames, "src", {5, 6}, o, &ar, 0, 0.1);
  ASSERT_TRUE(rec.find("simulated_acceptance"));
  EXPECT_EQ(std::get<std::string>(*rec.find("simulated_acceptance")), "0.3/0.9");
  EXPECT_EQ(std::get<int64_t>(*rec.find("tokens_equal_ar")), -1) << "simulated tokens are not compared with ar";
  const RunRecord ar_rec = make_record(only[0], kNames, "src", {5, 6}, o, nullptr, 0, 0.1);
  EXPECT_EQ(std::get<std::string>(*ar_rec.find("simulated_acceptance")), "");
  EXPECT_EQ(std::get<int64_t>(*ar_rec.find("tokens_equal_ar")), 1);
}

TEST(SweepSimulate, ResumeAndMergeKeepSimulatedAndRealApart) {
  const auto pts = expand(grid({"triforce"}, parse_simulate_list("simulate-acceptance", "0.3/0.9, none")));
  ASSERT_EQ(pts.size(), 3u);  // ar, triforce simulated, triforce real
  const Point& sim = pts[1];
  const Point& real = pts[2];
  ASSERT_FALSE(sim.simulate_acceptance.empty());
  ASSERT_TRUE(real.simulate_acceptance.empty());
  const auto dir = tmp_dir("sweep_sim");
  const std::string a = (dir / "a.h5").string(), b = (dir / "b.h5").string(), out = (dir / "m.h5").string();
  for (const auto& f : {a, b, out}) fs::remove(f);
  FileHeader h;
  h.config = "method = triforce\n";
  tf::speculative::MethodOutcome o;
  o.tokens = {4, 5};
  o.decode_ms_per_token = 1;
  {
    ResultsWriter w(a, h);
    w.append(make_record(real, kNames, "src", {1}, o, nullptr, 0, 0.1));
    // Resume: the real run's completion does not count as the simulated one's.
    EXPECT_TRUE(w.completed().count(real.key(kNames)));
    EXPECT_FALSE(w.completed().count(sim.key(kNames)));
  }
  {
    ResultsWriter w(b, h);
    w.append(make_record(sim, kNames, "src", {1}, o, nullptr, 1, 0.1));
  }
  EXPECT_EQ(merge_files(out, {a, b}).runs, 2);
  auto f = tf::h5::open_file(out, false);
  auto runs = read_completed(f, out);
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& r : runs) {
    auto g = tf::h5::open_group(f, "/runs/" + run_group_name(r.index));
    EXPECT_EQ(tf::h5::get_string_attr(g.id(), "simulated_acceptance"), r.index == sim.index ? "0.3/0.9" : "");
  }
}
