// The prompts of a sweep, each cut to every context length of the grid:
//   text       literal --prompt values
//   files      --prompt-file: text, tokenized with the target's tokenizer
//   tokens     --prompt-tokens: .npy or FILE.h5:/dataset (int; 1-D = one prompt, 2-D = one per row)
//   sets       --prompt-set: documents in the prompt folder (default: all of them), written by
//              experiments/prompts/make_default_prompts.sh from Debian's public-domain texts
// A prompt shorter than a context length is an error naming both.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tf::sweep {

struct PromptSources {
  std::vector<std::string> texts, files, tokens, sets;
  std::string set_dir;  // empty: $TRIFORCE_CACHE/prompts (default ~/.cache/triforce/prompts)
};

std::string default_prompt_dir();

class PromptSet {
 public:
  // Reads every source (text stays untokenized until cut()).
  explicit PromptSet(const PromptSources& src);
  int64_t size() const { return int64_t(docs_.size()); }
  const std::vector<std::string>& names() const { return names_; }
  const std::string& source(int64_t i) const { return docs_.at(size_t(i)).source; }
  bool needs_tokenizer() const;
  // The first `context` tokens of prompt i (text is encoded with BOS as the
  // tokenizer adds it). tok may be null when every prompt is pre-tokenized.
  std::vector<int32_t> cut(int64_t i, int64_t context, const Tokenizer* tok);
  // Tokens available (-1: text not tokenized yet).
  int64_t known_length(int64_t i) const;

 private:
  struct Doc {
    std::string source;
    std::string text;
    bool pretokenized = false;
    std::vector<int32_t> tokens;  // pretokenized, or the encoding of text[0, encoded_chars)
    size_t encoded_chars = 0;
  };
  void add(const std::string& name, Doc d);
  std::vector<Doc> docs_;
  std::vector<std::string> names_;
};

// FNV-1a over the ids: a short fingerprint of the exact prompt of a run.
std::string token_hash(const std::vector<int32_t>& ids);

}  // namespace tf::sweep
