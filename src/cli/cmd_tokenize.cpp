// triforce tokenize: a text file's token ids as the harness encodes them,
// written as .npy int32 [n] (or one id per line), for scripts that must see
// exactly the tokens `generate` sees (experiments/draft/train_draft.py).
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "io/npy.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {

int cmd_tokenize(const std::vector<std::string>& args) {
  po::options_description desc("tokenize options");
  desc.add_options()("model", po::value<std::string>(), "HF checkpoint folder or .gguf (default: the embedded model)")(
      "text-file", po::value<std::string>(), "the text to encode")(
      "out", po::value<std::string>(), "output: .npy (int32 [n]) or any other name (one id per line)")(
      "no-special", po::bool_switch(), "do not add the tokenizer's special tokens (BOS)");
  po::variables_map vm;
  if (!parse("tokenize", args, desc, vm)) return 0;
  TF_CHECK(vm.count("text-file"), "tokenize: --text-file F is required");
  TF_CHECK(vm.count("out"), "tokenize: --out F.npy is required");
  const std::string f = vm["text-file"].as<std::string>(), out = vm["out"].as<std::string>();
  std::ifstream in(f, std::ios::binary);
  TF_CHECK(in, "--text-file " << f << ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto tok = load_tokenizer(vm.count("model") ? vm["model"].as<std::string>() : default_model_path());
  const std::vector<int32_t> ids = tok->encode(ss.str(), !vm["no-special"].as<bool>());
  if (out.size() > 4 && out.substr(out.size() - 4) == ".npy") {
    write_npy_i32(out, ids.data(), {int64_t(ids.size())});
  } else {
    std::ofstream o(out);
    TF_CHECK(o, "--out " << out << ": cannot write");
    for (int32_t t : ids) o << t << "\n";
    TF_CHECK(o.good(), "--out " << out << ": write failed");
  }
  std::cout << "wrote " << out << " [" << ids.size() << "]\n";
  return 0;
}

}  // namespace tf::cli
