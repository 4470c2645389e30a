// triforce sweep: a grid of runs (methods x context lengths x budgets x ...)
// written to one HDF5 file that survives SIGKILL and resumes. The grid and the
// file layout live in src/sweep; this file turns options into them.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/session.h"
#include "cli/sweep_options.h"
#include "core/check.h"
#include "core/device.h"
#include "parallel/launch.h"
#include "parallel/tensor_parallel.h"
#include "model/checkpoint.h"
#include "sweep/grid.h"
#include "sweep/interrupt.h"
#include "sweep/lock.h"
#include "sweep/plan.h"
#include "sweep/prompts.h"
#include "sweep/provenance.h"
#include "sweep/results.h"
#include "sweep/runner.h"

namespace tf::cli {

namespace {

// Options that steer the process, not the results: left out of /config so a
// resume with --quiet (or another shard file) matches.
const std::set<std::string> kNotInConfig = {"help", "config", "out", "shard", "dry-run", "quiet", "est-gflops",
                                            "est-gbps", "tp-mode"};

std::string value_text(const boost::any& v) {
  if (auto* s = boost::any_cast<std::string>(&v)) return *s;
  if (auto* b = boost::any_cast<bool>(&v)) return *b ? "true" : "false";
  if (auto* d = boost::any_cast<double>(&v)) {
    std::ostringstream os;
    os << *d;
    return os.str();
  }
  if (auto* vs = boost::any_cast<std::vector<std::string>>(&v)) {
    std::string out;
    for (const auto& s : *vs) out += (out.empty() ? "" : "\n  ") + s;
    return out;
  }
  return "?";
}

// The resolved config: every option that shapes results, one `key = value`
// line each in the order of --help (defaults included).
std::string resolved_config(const po::options_description& desc, const po::variables_map& vm,
                            const std::string& target) {
  std::ostringstream os;
  os << "# triforce sweep, resolved options\n";
  if (!vm.count("target")) os << "target = " << target << "\n";  // the embedded default model
  for (const auto& o : desc.options()) {
    const std::string& k = o->long_name();
    if (kNotInConfig.count(k) || !vm.count(k)) continue;
    os << k << " = " << value_text(vm[k].value()) << "\n";
  }
  return os.str();
}

// The prompt covers the point's context and every id fits the target's vocabulary.
void check_vocab(sweep::PromptSet& prompts, const sweep::Point& p, const Tokenizer* tok, int64_t vocab) {
  for (int32_t id : prompts.cut(p.prompt, p.context, tok))
    TF_CHECK(id >= 0 && id < vocab, "sweep: prompt " << prompts.names()[size_t(p.prompt)] << " (" << prompts.source(p.prompt)
                                                     << ") holds token " << id << ", outside the target's vocabulary of "
                                                     << vocab << " (--prompt-tokenizer)");
}

double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

std::string fmt_s(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

void print_dry_run(const std::vector<sweep::Point>& all, const std::vector<sweep::Point>& mine, const sweep::Shard& sh,
                   const ModelConfig& cfg, const sweep::Throughput& tp, sweep::PromptSet& prompts,
                   const Tokenizer* tok, const std::string& out, const std::string& device,
                   const std::map<std::string, ModelConfig>& draft_cfgs) {
  const auto& names = prompts.names();
  std::set<std::string> done;
  if (std::ifstream(out).good()) {
    try {
      h5::Handle f = h5::open_checked(out);
      sweep::check_schema(f, out);
      for (const auto& c : sweep::read_completed(f, out)) done.insert(c.key);
    } catch (const tf::Error& e) {
      std::printf("note: %s\n", e.what());
    }
  }
  std::printf("grid: %zu points in %lld units; shard %s: %zu points; out %s (%zu done)\n", all.size(),
              all.empty() ? 0LL : (long long)all.back().unit + 1, sh.str().c_str(), mine.size(), out.c_str(),
              done.size());
  std::printf("%6s %-15s %-18s %7s %5s %6s %5s %3s %3s %4s %6s %-10s %5s %5s %5s %3s %9s %9s %8s\n", "index", "method",
              "prompt", "context", "new", "budget", "chunk", "g1", "g2", "sink", "window", "reretrieve", "T", "top_p",
              "seed", "rep", "mem_GiB", "snap_GiB", "est_s");
  double total_s = 0, peak = 0, prefill_s = 0;
  int64_t peak_at = -1, prefills = 0;
  std::set<std::pair<int64_t, int64_t>> groups;
  for (const auto& p : mine) {
    // Validates that the prompt covers the context (tokenizing text prompts).
    check_vocab(prompts, p, tok, cfg.vocab_size);
    const ModelConfig* dc = draft_cfgs.count(p.draft) ? &draft_cfgs.at(p.draft) : nullptr;
    const sweep::MemoryPlan m = sweep::memory_plan(cfg, p, tp, dc);
    double est = sweep::estimate_decode_s(cfg, p, tp);
    if (groups.insert({p.prompt, p.context}).second) {
      const double pf = sweep::estimate_prefill_s(cfg, p.context, tp);
      prefill_s += pf;
      est += pf;
      ++prefills;
    }
    const bool is_done = done.count(p.key(names)) > 0;
    if (!is_done) total_s += est;
    if (m.total() > peak) peak = m.total(), peak_at = p.index;
    auto n = [](int64_t v) { return v < 0 ? std::string("-") : std::to_string(v); };
    std::printf("%6lld %-15s %-18s %7lld %5lld %6s %5s %3s %3s %4s %6s %-10s %5g %5g %5llu %3lld %9.3f %9.3f %8.1f%s\n",
                (long long)p.index, p.method.c_str(), names[size_t(p.prompt)].substr(0, 18).c_str(),
                (long long)p.context, (long long)p.max_new, n(p.budget).c_str(), n(p.chunk).c_str(),
                n(p.gamma1).c_str(), n(p.gamma2).c_str(), n(p.sink).c_str(), n(p.window).c_str(),
                p.reretrieve.empty() ? "-" : p.reretrieve.c_str(), p.temperature, p.top_p,
                (unsigned long long)p.seed, (long long)p.rep, gib(m.total()), gib(m.snapshot), est,
                ((is_done ? "  (done)" : "") +
                 (p.simulate_acceptance.empty() ? "" : "  SIMULATED acceptance " + p.simulate_acceptance))
                    .c_str());
  }
  if (peak_at >= 0) {
    const auto& p = *std::find_if(mine.begin(), mine.end(), [&](const auto& q) { return q.index == peak_at; });
    const ModelConfig* dc = draft_cfgs.count(p.draft) ? &draft_cfgs.at(p.draft) : nullptr;
    const auto m = sweep::memory_plan(cfg, p, tp, dc);
    std::printf("memory plan (%s, %.0f-byte elements), peak at point %lld: weights %.3f + full KV %.3f + prefill "
                "snapshot %.3f + speculative levels %.3f + draft weights %.3f + scratch %.3f = %.3f GiB\n",
                device.c_str(), tp.elem_bytes, (long long)peak_at, gib(m.weights), gib(m.full_kv), gib(m.snapshot),
                gib(m.levels), gib(m.draft_weights), gib(m.scratch), gib(m.total()));
  }
  std::printf("estimated time for the %zu pending points: %s (%lld prefills, %s of it), at %.0f GFLOP/s prefill and "
              "%.0f GB/s decode, every method at ar's rate (rough; --est-gflops / --est-gbps)\n",
              mine.size() - std::min(mine.size(), done.size()), fmt_s(total_s).c_str(), (long long)prefills,
              fmt_s(prefill_s).c_str(), tp.flops / 1e9, tp.bytes_per_s / 1e9);
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& args) {
  po::options_description desc("sweep options (lists are comma-separated; ranges FIRST:LAST:STEP)");
  add_sweep_options(desc);
  add_offload_options(desc);
  desc.add_options()("help,h", "show this help")("config", po::value<std::string>(),
                                                 "INI file with any of these keys; the command line wins");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: triforce sweep --config FILE.ini [--KEY VALUE ...] --out FILE.h5\n" << desc << "\n";
      return 0;
    }
    if (vm.count("config")) {
      const auto path = vm["config"].as<std::string>();
      std::ifstream in(path);
      TF_CHECK(in, "--config " << path << ": cannot open file");
      // Strict: a misspelled key in a sweep config must not be silently ignored.
      po::store(po::parse_config_file(in, desc, /*allow_unregistered=*/false), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    TF_FAIL("triforce sweep: " << e.what());
  }
  TF_CHECK(vm.count("out"), "sweep: --out FILE.h5 is required");
  TF_CHECK(vm.count("context"), "sweep: --context is required (the context lengths)");
  const std::string out = vm["out"].as<std::string>();
  const std::string device = vm["device"].as<std::string>();
  TF_CHECK(device == "cpu" || device == "cuda", "--device: expected cpu or cuda, got '" << device << "'");
  set_cuda_graphs_default(!vm["no-cuda-graphs"].as<bool>());  // before any model exists
  const sweep::Shard shard = sweep::Shard::parse(vm["shard"].as<std::string>());
  const bool dry = vm["dry-run"].as<bool>();
  parallel::set_tp_mode(parallel::parse_tp_mode(vm["tp-mode"].as<std::string>()));
  const bool quiet = vm["quiet"].as<bool>();
  // Tensor parallelism: driven, rank 0 runs the points and the workers serve
  // its target steps; lockstep, every rank runs the same points in the same
  // order on its shard (identical logits, identical paths). Only rank 0 locks and writes.
  const bool writer_rank = parallel::writes_outputs();

  sweep::GridSpec g = grid_from_options(vm);

  sweep::PromptSources ps;
  if (vm.count("prompt")) ps.texts = vm["prompt"].as<std::vector<std::string>>();
  ps.files = list_or_empty(vm, "prompt-file");
  ps.tokens = list_or_empty(vm, "prompt-tokens");
  ps.sets = list_or_empty(vm, "prompt-set");
  ps.set_dir = vm["prompt-dir"].as<std::string>();
  sweep::PromptSet prompts(ps);
  g.n_prompts = prompts.size();

  const std::vector<sweep::Point> all = sweep::expand(g);
  const std::vector<sweep::Point> mine = sweep::select_shard(all, shard);
  const std::string path = vm.count("target") ? vm["target"].as<std::string>() : default_model_path();
  const std::string tokenizer_path =
      vm["prompt-tokenizer"].as<std::string>().empty() ? path : vm["prompt-tokenizer"].as<std::string>();

  if (dry) {
    const ModelConfig target_cfg = peek_config(path);  // checkpoints and synthetic:NAME
    std::unique_ptr<Tokenizer> tok;
    if (prompts.needs_tokenizer()) tok = load_tokenizer(tokenizer_path);
    std::map<std::string, ModelConfig> draft_cfgs;
    for (const auto& d : g.drafts)  // PATH, model:PATH or synthetic:NAME (a layer skip shares the target's weights)
      if (!d.empty() && d.rfind("layerskip:", 0) != 0 && d.rfind("ngram:", 0) != 0)
        draft_cfgs[d] = peek_config(d.rfind("model:", 0) == 0 ? d.substr(6) : d);
    sweep::Throughput tp;
    if (device == "cuda") tp = {4e14, 3e12, 2};
    if (vm.count("est-gflops")) tp.flops = vm["est-gflops"].as<double>() * 1e9;
    if (vm.count("est-gbps")) tp.bytes_per_s = vm["est-gbps"].as<double>() * 1e9;
    print_dry_run(all, mine, shard, target_cfg, tp, prompts, tok.get(), out, device, draft_cfgs);
    TF_CHECK(std::fflush(stdout) == 0 && !std::ferror(stdout), "sweep --dry-run: cannot write the plan to stdout");
    return 0;
  }

  // Every prompt must cover its context lengths, and the output folder must be
  // writable, before anything is written (the lock file included).
  std::unique_ptr<Tokenizer> tok;
  if (prompts.needs_tokenizer()) tok = load_tokenizer(tokenizer_path);
  const int64_t vocab = peek_config(path).vocab_size;
  std::set<std::pair<int64_t, int64_t>> cuts;
  for (const auto& p : mine)
    if (cuts.insert({p.prompt, p.context}).second) check_vocab(prompts, p, tok.get(), vocab);
  std::unique_ptr<sweep::FileLock> lock;
  if (writer_rank) {
    // A file-size limit (ulimit -f) then fails the write with EFBIG, which the
    // writer reports, instead of killing the process mid-write.
    std::signal(SIGXFSZ, SIG_IGN);
    sweep::check_output_path(out);
    lock = std::make_unique<sweep::FileLock>(out);
  }
  DeviceChoice dev = parse_device(device, vm["dtype"].as<std::string>());
  apply_offload_options(vm, peek_config(path).num_layers, dev);
  if (dev.offload.enabled) {
    // The plan pins the longest point's cache twice: the shared snapshot and
    // the copy each grid point decodes in.
    int64_t longest = 0;
    for (const auto& p : mine) longest = std::max(longest, p.context + p.max_new + 64);
    dev.plan_context = longest;
    dev.plan.kv_copies = 2;
  }
  Session s = open_session(path, /*kv_capacity=*/0, /*with_tokenizer=*/false, dev);
  if (parallel::tp_driven() && parallel::is_worker()) {
    parallel::serve_steps(*s.model);  // rank 0 runs the points; shutdown ends it
    return 0;
  }

  sweep::FileHeader header;
  header.config = resolved_config(desc, vm, path);
  header.root = sweep::provenance(device, parallel::world().size);
  header.root.emplace_back("name", vm["name"].as<std::string>());
  header.root.emplace_back("target", path);
  header.root.emplace_back("shard", shard.str());
  header.root.emplace_back("cuda_graphs", int64_t(device == "cuda" && cuda_graphs_default()));
  header.root.emplace_back("grid_points", int64_t(all.size()));
  header.root.emplace_back("shard_points", int64_t(mine.size()));
  std::string cmd = "triforce sweep";
  for (const auto& a : args) cmd += " " + a;
  header.root.emplace_back("command", cmd);
  sweep::ResultsWriter writer(out, header, writer_rank);
  if (writer_rank) sweep::install_interrupt_note(out, int64_t(writer.completed().size()));

  sweep::RunnerOptions ro;
  if (!vm["ignore-eos"].as<bool>()) ro.stop_ids = s.config().eos_token_ids;
  ro.shard = shard.index;
  ro.target_path = path;
  ro.full_hierarchy = vm["full-hierarchy"].as<bool>();
  ro.progress = !quiet && writer_rank;
  if (writer_rank) ro.on_saved = [](int64_t runs) { sweep::set_interrupt_note_runs(runs); };
  // Kernels run asynchronously: without a sync before each clock read a phase that only launches
  // (the retrieval build) would be charged to whichever later phase waits for it.
  if (device == "cuda") ro.device_sync = [] { device_synchronize(); };
  const sweep::SweepStats st = sweep::run_points(*s.model, tok.get(), prompts, mine, writer, ro);
  if (!quiet && writer_rank)
    std::fprintf(stderr,
                 "sweep %s: %lld runs written, %lld already done, %lld prefills, %.1f s; appends took %.1f ms in all "
                 "(%.2f ms each)\n",
                 out.c_str(), (long long)st.ran, (long long)st.skipped, (long long)st.prefills, st.seconds,
                 st.append_ms, st.ran ? st.append_ms / double(st.ran) : 0.0);
  return 0;
}

}  // namespace tf::cli
