// Tensor-parallel costs on this machine, under mpirun -np N (not a test; the
// numbers go into docs/ARCHITECTURE.md "Tensor parallelism"):
//   1. the op stream: one broadcast batch per verify step (sync + logits of 7 new tokens)
//   2. the logits every rank needs in lockstep mode (allgather) vs rank 0 alone (gather), [7, V]
//   3. a decode step of the target with a vocab-parallel vs a replicated lm_head
//   4. a layer-skip draft step: sharded over the ranks vs whole on one rank
//   5. TriForce end to end through speculative::run_method: driven (rank 0 runs the
//      method and its draft, the workers serve) vs lockstep (every rank runs it),
//      decode ms/token, the median of 3 runs after a warm-up run
// Usage: mpirun -np N bench_tp [model] (default: the SmolLM2 GGUF in ~/.cache/triforce, 3 KV heads: N = 3).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "parallel/launch.h"
#include "parallel/mpi_comm.h"
#include "parallel/step_driver.h"
#include "parallel/step_protocol.h"
#include "parallel/target_levels.h"
#include "parallel/tensor_parallel.h"
#include "model/checkpoint.h"
#include "speculative/drafter.h"
#include "speculative/methods.h"
#include "tokenizer/tokenizer.h"

using namespace tf;
using namespace tf::parallel;

namespace {
using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// Median-free, simple: the mean over iters after a warm-up, agreed by all ranks (max).
template <class F> double time_us(int iters, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  double us = us_since(t0) / iters, mx = 0;
  MPI_Allreduce(&us, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mx;
}

double decode_ms(LlamaModel& m, int steps) {
  auto cache = m.make_cache(64 + steps + 8);
  std::vector<int32_t> p(64);
  for (int i = 0; i < 64; ++i) p[size_t(i)] = 100 + i;
  m.forward(p, cache, 1);
  return time_us(steps, [&] { m.forward({int32_t(7)}, cache, 1); }) / 1e3;
}
}  // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
  init(&argc, &argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    abort_all(e.what());
  }
}

int run(int argc, char** argv) {
  World& w = world();
  if (w.size < 2) {
    std::fprintf(stderr, "run me under mpirun -np N (N >= 2)\n");
    finalize();
    return 2;
  }
  const std::string home = std::getenv("HOME") ? std::getenv("HOME") : ".";
  const std::string path = argc > 1 ? argv[1] : home + "/.cache/triforce/SmolLM2-135M-Instruct.Q4_1.gguf";
  Checkpoint ck = open_checkpoint(path);
  const int64_t V = ck.config.vocab_size;
  auto say = [&](const char* fmt, auto... a) {
    if (w.rank == 0) std::printf(fmt, a...);
  };
  say("bench_tp: %d ranks, %s (vocab %lld)\n", w.size, path.c_str(), (long long)V);

  {  // 1. op stream
    StepChannel ch(MPI_COMM_WORLD);
    StepCodec codec;
    std::vector<int32_t> ctx(2000, 5);
    const int iters = 2000;
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (w.rank == 0) {
        std::vector<int32_t> seq = ctx;
        for (int k = 0; k < 7; ++k) seq.push_back(i + k);
        ch.send(codec.encode({{Op::sync, 0, {}, ctx}, {Op::logits, 0, {7}, seq}}));
        ctx.push_back(i);
      } else {
        codec.decode(ch.receive());
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    say("1. op stream: %.1f us per verify-step batch (broadcast + encode/decode, %lld bytes per batch)\n",
        us_since(t0) / iters, (long long)(ch.stats().bytes / std::max<int64_t>(1, ch.stats().batches)));
  }
  {  // 2. allgather vs gather of [7, V] logits
    Communicator& c = *tp_communicator();
    std::vector<int64_t> cols = vocab_slice_sizes(V, w.size);
    Tensor local = Tensor::cpu(DType::F32, {7, cols[size_t(w.rank)]}), full = Tensor::cpu(DType::F32, {7, V});
    const double ag = time_us(200, [&] { c.allgather_columns(local, full, cols); });
    std::vector<int> counts, displs;
    int off = 0;
    for (int64_t x : cols) {
      counts.push_back(int(7 * x));
      displs.push_back(off);
      off += int(7 * x);
    }
    std::vector<float> stage(size_t(7 * V));
    const double g = time_us(200, [&] {
      MPI_Gatherv(local.data, int(local.numel()), MPI_FLOAT, stage.data(), counts.data(), displs.data(), MPI_FLOAT, 0,
                  MPI_COMM_WORLD);
    });
    say("2. logits [7, %lld] f32: allgather (every rank) %.1f us, gather to rank 0 %.1f us\n", (long long)V, ag, g);
  }
  {  // 3. lm_head vocab-parallel vs replicated
    ShardSpec s = tp_shard(ck.config, path);
    s.vocab_parallel_head = true;
    LlamaModel vp(ck.config, LlamaWeights::load(*ck.weights, ck.config, s), 512, tp_communicator());
    const double a = decode_ms(vp, 30);
    s.vocab_parallel_head = false;
    LlamaModel rep(ck.config, LlamaWeights::load(*ck.weights, ck.config, s), 512, tp_communicator());
    const double b = decode_ms(rep, 30);
    say("3. target decode step: vocab-parallel lm_head %.2f ms, replicated %.2f ms\n", a, b);
    // 4. layer-skip draft (a quarter of the layers... here 24 of 30 as in the CLI tests)
    const int64_t K = std::max<int64_t>(1, ck.config.num_layers * 4 / 5);
    LlamaModel sharded = speculative::make_layer_skip_model(vp, K);
    const double sh = decode_ms(sharded, 30);
    ModelConfig c1 = ck.config;
    c1.num_layers = K;
    double whole = 0;
    if (w.rank == 0) {
      LlamaModel m(c1, LlamaWeights::load(*ck.weights, c1), 512);
      auto cache = m.make_cache(128);
      std::vector<int32_t> p(64, 3);
      m.forward(p, cache, 1);
      const auto t0 = Clock::now();
      for (int i = 0; i < 30; ++i) m.forward({int32_t(7)}, cache, 1);
      whole = us_since(t0) / 30 / 1e3;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    say("4. layerskip:%lld draft step: sharded over %d ranks %.2f ms, whole on rank 0 %.2f ms\n", (long long)K,
        w.size, sh, whole);

    // 5. TriForce (default draft layerskip:L/4 on a StreamingLLM cache > retrieval > full) in both modes.
    std::vector<int32_t> prompt;
    {
      auto tok = load_tokenizer(path);
      std::string text;
      for (int i = 0; i < 12; ++i)
        text += "The history of the printing press begins in the fifteenth century, when movable type made books "
                "cheap enough for ordinary readers. ";
      prompt = tok->encode(text, true);
    }
    speculative::MethodRequest req;
    req.method = "triforce";
    req.max_new_tokens = 32;
    req.target_path = path;
    speculative::DraftModels drafts;
    auto median_ms = [&](bool driven) {
      set_tp_mode(driven ? TpMode::driven : TpMode::lockstep);
      std::vector<double> ms;
      std::vector<int32_t> tokens;
      if (driven && w.rank != 0) {
        serve_steps(vp);
      } else {
        for (int i = 0; i < 4; ++i) {  // the first is the warm-up
          const speculative::MethodOutcome o = speculative::run_method(vp, req, prompt, nullptr, &drafts);
          if (i) ms.push_back(o.decode_ms_per_token);
          tokens = o.tokens;
        }
        if (driven) step_driver().shutdown();
      }
      MPI_Barrier(MPI_COMM_WORLD);
      std::sort(ms.begin(), ms.end());
      return std::make_pair(ms.empty() ? 0.0 : ms[ms.size() / 2], tokens);
    };
    const auto d = median_ms(true), l = median_ms(false);
    say("5. triforce (%zu-token prompt, 32 new tokens): driven %.1f ms/token, lockstep %.1f ms/token (tokens %s)\n",
        prompt.size(), d.first, l.first, d.second == l.second ? "identical" : "DIFFER");
  }
  finalize();
  return 0;
}
