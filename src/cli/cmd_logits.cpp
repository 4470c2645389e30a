// triforce logits: one forward over the given tokens; writes [n, vocab] f32 to
// .npy (or an HDF5 dataset "logits" when the name ends in .h5); with --draft
// the logits of a draft checkpoint as the speculative methods load it.
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/session.h"
#include "parallel/tensor_parallel.h"
#include "speculative/methods.h"
#include "io/h5_array.h"
#include "io/npy.h"

namespace tf::cli {

int cmd_logits(const std::vector<std::string>& args) {
  po::options_description desc("logits options");
  desc.add_options()("model", po::value<std::string>(), "HF checkpoint folder or .gguf (default: the embedded model)")(
      "device", po::value<std::string>()->default_value("cpu"), "cpu | cuda")(
      "dtype", po::value<std::string>()->default_value("bf16"), "CUDA storage dtype: f16 | bf16")(
      "tokens", po::value<std::string>(), "comma-separated token ids")(
      "tokens-file", po::value<std::string>(), "one id per line, or an .npy int32 array")(
      "out", po::value<std::string>(), "output .npy (float32 [n, vocab]) or .h5")(
      "last", po::value<int64_t>(), "write only the last N rows")(
      "draft", po::value<std::string>(),
      "write the logits of this draft checkpoint instead, loaded as --draft loads it for --model (a draft that "
      "borrows the target's embedding needs its target)");
  po::variables_map vm;
  if (!parse("logits", args, desc, vm)) return 0;
  TF_CHECK(vm.count("tokens") + vm.count("tokens-file") == 1, "logits: give exactly one of --tokens and --tokens-file");
  TF_CHECK(vm.count("out"), "logits: --out F.npy is required");
  const auto tokens = vm.count("tokens") ? parse_token_list(vm["tokens"].as<std::string>())
                                         : read_token_file(vm["tokens-file"].as<std::string>());
  int64_t n_out = int64_t(tokens.size());
  if (vm.count("last")) {
    n_out = vm["last"].as<int64_t>();
    TF_CHECK(n_out >= 1 && n_out <= int64_t(tokens.size()),
             "--last: expected 1.." << tokens.size() << ", got " << n_out);
  }
  const std::string out = vm["out"].as<std::string>();
  Session s = open_session(vm.count("model") ? vm["model"].as<std::string>() : default_model_path(),
                           int64_t(tokens.size()), /*with_tokenizer=*/false,
                           parse_device(vm["device"].as<std::string>(), vm["dtype"].as<std::string>()));
  for (auto t : tokens)
    TF_CHECK(t < s.config().vocab_size, "--tokens: id " << t << " is outside the vocabulary of "
                                                        << s.config().vocab_size);
  Tensor logits;
  if (vm.count("draft")) {
    speculative::DraftModels drafts;
    LlamaModel& d = drafts.get(vm["draft"].as<std::string>(), *s.model);
    FullKVCache cache = d.make_cache(int64_t(tokens.size()));
    logits = d.forward(tokens, cache, n_out);
  } else {
    logits = s.model->forward(tokens, *s.cache, n_out);
  }
  if (!parallel::writes_outputs()) return 0;  // a tensor-parallel worker: rank 0 writes
  if (out.size() > 3 && out.substr(out.size() - 3) == ".h5")
    write_h5_array(out, "logits", logits, {{"model", s.path}});
  else
    write_npy(out, logits);
  std::cout << "wrote " << out << " [" << logits.dim(0) << ", " << logits.dim(1) << "]\n";
  return 0;
}

}  // namespace tf::cli
