// One tokenizer interface for byte-level BPE (tokenizer.json or GGUF metadata)
// and SentencePiece (tokenizer.model).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tf {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids exactly as the model's HF tokenizer gives them for `text`
  // (add_special_tokens=add_bos semantics: prepends BOS only when the model's
  // tokenizer does so).
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special = true) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 if none
  virtual int32_t eos_id() const = 0;  // -1 if none
  virtual std::string kind() const = 0;  // "bpe" or "sentencepiece"
};

// path: an HF checkpoint folder (tokenizer.json, else tokenizer.model) or a
// .gguf file (tokenizer.ggml.* metadata). Throws tf::Error naming the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace tf
