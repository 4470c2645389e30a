#include "sweep/prompts.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/check.h"
#include "io/h5_array.h"
#include "io/npy.h"

namespace tf::sweep {

namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path, const std::string& option) {
  std::ifstream in(path, std::ios::binary);
  TF_CHECK(in, "--" << option << " " << path << ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  TF_CHECK(!ss.str().empty(), "--" << option << " " << path << ": the file is empty");
  return ss.str();
}

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

// Rows of an int array ([n] = one prompt, [rows, n] = one per row).
std::vector<std::vector<int32_t>> read_token_rows(const std::string& spec) {
  std::vector<int64_t> shape;
  std::vector<int32_t> flat;
  const auto colon = spec.find(".h5:") != std::string::npos ? spec.find(".h5:") + 3 : spec.find(".hdf5:") != std::string::npos ? spec.find(".hdf5:") + 5 : std::string::npos;
  if (colon != std::string::npos) {
    const std::string file = spec.substr(0, colon), dataset = spec.substr(colon + 1);
    Tensor t = read_h5_array(file, dataset);
    TF_CHECK(t.dtype == DType::I32, "--prompt-tokens " << spec << ": expected an integer dataset of token ids");
    shape = t.shape;
    flat.assign(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  } else {
    TF_CHECK(ends_with(spec, ".npy"), "--prompt-tokens " << spec << ": expected FILE.npy or FILE.h5:/dataset");
    NpyArray a = read_npy_array(spec);
    TF_CHECK(a.dtype != "f32", "--prompt-tokens " << spec << ": expected integer token ids, got float");
    shape = a.shape;
    for (auto v : a.ints) {
      TF_CHECK(v >= 0 && v <= INT32_MAX, "--prompt-tokens " << spec << ": token id " << v << " out of range");
      flat.push_back(int32_t(v));
    }
  }
  TF_CHECK(shape.size() == 1 || shape.size() == 2,
           "--prompt-tokens " << spec << ": expected a 1-D or 2-D array, got " << shape.size() << " dimensions");
  const int64_t rows = shape.size() == 1 ? 1 : shape[0];
  const int64_t cols = shape.back();
  TF_CHECK(rows >= 1 && cols >= 1, "--prompt-tokens " << spec << ": the array is empty");
  std::vector<std::vector<int32_t>> out;
  for (int64_t r = 0; r < rows; ++r) out.emplace_back(flat.begin() + r * cols, flat.begin() + (r + 1) * cols);
  return out;
}

}  // namespace

std::string default_prompt_dir() {
  fs::path cache;
  if (const char* c = std::getenv("TRIFORCE_CACHE")) cache = c;
  else if (const char* x = std::getenv("XDG_CACHE_HOME")) cache = fs::path(x) / "triforce";
  else if (const char* h = std::getenv("HOME")) cache = fs::path(h) / ".cache" / "triforce";
  return (cache / "prompts").string();
}

void PromptSet::add(const std::string& name, Doc d) {
  TF_CHECK(std::find(names_.begin(), names_.end(), name) == names_.end(),
           "sweep: two prompts are named '" << name << "' (" << d.source << "); prompt names must be unique");
  names_.push_back(name);
  docs_.push_back(std::move(d));
}

PromptSet::PromptSet(const PromptSources& src) {
  for (size_t i = 0; i < src.texts.size(); ++i) {
    Doc d;
    d.source = "--prompt";
    d.text = src.texts[i];
    TF_CHECK(!d.text.empty(), "--prompt: an empty prompt");
    add("text" + std::to_string(i), std::move(d));
  }
  for (const auto& f : src.files) {
    Doc d;
    d.source = f;
    d.text = read_text(f, "prompt-file");
    add(fs::path(f).stem().string(), std::move(d));
  }
  for (const auto& spec : src.tokens) {
    auto rows = read_token_rows(spec);
    const std::string stem = fs::path(spec.substr(0, spec.find(':'))).stem().string();
    for (size_t r = 0; r < rows.size(); ++r) {
      Doc d;
      d.source = spec;
      d.pretokenized = true;
      d.tokens = std::move(rows[r]);
      add(rows.size() == 1 ? stem : stem + "#" + std::to_string(r), std::move(d));
    }
  }
  const std::string dir = src.set_dir.empty() ? default_prompt_dir() : src.set_dir;
  for (const auto& set : src.sets) {
    std::vector<fs::path> files;
    if (fs::is_directory(dir))
      for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".txt" &&
            (set == "default" || e.path().stem().string().rfind(set, 0) == 0))
          files.push_back(e.path());
    TF_CHECK(!files.empty(), "--prompt-set " << set << ": no matching documents (*.txt) in " << dir
                                             << "; run experiments/prompts/make_default_prompts.sh");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      Doc d;
      d.source = f.string();
      d.text = read_text(f.string(), "prompt-set");
      add(f.stem().string(), std::move(d));
    }
  }
  TF_CHECK(!docs_.empty(), "sweep: no prompts; give --prompt, --prompt-file, --prompt-tokens or --prompt-set");
}

bool PromptSet::needs_tokenizer() const {
  for (const auto& d : docs_)
    if (!d.pretokenized) return true;
  return false;
}

int64_t PromptSet::known_length(int64_t i) const {
  const Doc& d = docs_.at(size_t(i));
  if (d.pretokenized || d.encoded_chars == d.text.size()) return int64_t(d.tokens.size());
  return -1;
}

std::vector<int32_t> PromptSet::cut(int64_t i, int64_t context, const Tokenizer* tok) {
  Doc& d = docs_.at(size_t(i));
  if (!d.pretokenized) {
    TF_CHECK(tok, "sweep: prompt " << names_[size_t(i)] << " is text and the target has no tokenizer");
    // Encode a growing prefix of the text: a cut inside a word only changes
    // the last few tokens, so keep a margin beyond the context.
    const int64_t margin = 64;
    size_t chars = std::max<size_t>(d.encoded_chars, size_t(context) * 6 + 256);
    while (int64_t(d.tokens.size()) < context + margin && d.encoded_chars < d.text.size()) {
      chars = std::min(chars, d.text.size());
      while (chars < d.text.size() && (static_cast<unsigned char>(d.text[chars]) & 0xC0) == 0x80) ++chars;
      d.tokens = tok->encode(d.text.substr(0, chars), true);
      d.encoded_chars = chars;
      chars *= 2;
    }
  }
  TF_CHECK(int64_t(d.tokens.size()) >= context,
           "sweep: prompt " << names_[size_t(i)] << " (" << d.source << ") has " << d.tokens.size()
                            << " tokens, fewer than --context " << context);
  return std::vector<int32_t>(d.tokens.begin(), d.tokens.begin() + context);
}

std::string token_hash(const std::vector<int32_t>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : ids)
    for (int b = 0; b < 4; ++b) {
      h ^= (uint32_t(t) >> (8 * b)) & 0xFF;
      h *= 1099511628211ull;
    }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

}  // namespace tf::sweep
