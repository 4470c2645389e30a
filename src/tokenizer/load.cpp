// load_tokenizer: HF folder (tokenizer.json, else tokenizer.model), a
// tokenizer.json / tokenizer.model file, or a .gguf file.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "io/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  TF_CHECK(f, p.string() << ": cannot open");
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

std::unique_ptr<Tokenizer> load_spm(const fs::path& model, const fs::path& dir) {
  bool add_bos = true, add_eos = false;
  fs::path cfg = dir / "tokenizer_config.json";
  if (fs::exists(cfg)) {
    auto j = nlohmann::json::parse(read_text(cfg), nullptr, false);
    if (j.is_object()) {
      if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) add_bos = j["add_bos_token"].get<bool>();
      if (j.contains("add_eos_token") && j["add_eos_token"].is_boolean()) add_eos = j["add_eos_token"].get<bool>();
    }
  }
  return std::make_unique<SpmTokenizer>(model.string(), add_bos, add_eos);
}

std::unique_ptr<Tokenizer> load_json(const fs::path& file, const fs::path& dir) {
  fs::path cfg = dir / "tokenizer_config.json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text(file));
  } catch (const nlohmann::json::exception& e) {
    TF_FAIL(file.string() << ": invalid JSON: " << e.what());
  }
  if (is_sentencepiece_style(j)) {
    // Llama-2-style HF folders ship both; the .model is the reference.
    TF_CHECK(fs::exists(dir / "tokenizer.model"),
             file.string() << ": SentencePiece-style tokenizer.json (byte_fallback/Unigram) is not "
                              "supported without tokenizer.model next to it");
    return load_spm(dir / "tokenizer.model", dir);
  }
  return load_bpe_from_json(j, file.string(), fs::exists(cfg) ? read_text(cfg) : std::string());
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  fs::path p(path);
  TF_CHECK(fs::exists(p), path << ": no such file or directory");
  if (fs::is_directory(p)) {
    if (fs::exists(p / "tokenizer.json")) return load_json(p / "tokenizer.json", p);
    if (fs::exists(p / "tokenizer.model")) return load_spm(p / "tokenizer.model", p);
    TF_FAIL(path << ": no tokenizer.json or tokenizer.model in the folder");
  }
  if (ends_with(path, ".gguf")) {
    GgufFile g(path);
    const std::string model = g.get_string("tokenizer.ggml.model", "");
    TF_CHECK(model != "llama", path << ": SentencePiece ('llama') GGUF vocab is not supported; "
                                       "use the HF folder's tokenizer.model");
    return load_bpe_from_gguf(g);
  }
  if (ends_with(path, ".json")) return load_json(p, p.parent_path());
  if (ends_with(path, ".model")) return load_spm(p, p.parent_path());
  TF_FAIL(path << ": not a tokenizer folder, tokenizer.json, tokenizer.model or .gguf file");
}

}  // namespace tf
