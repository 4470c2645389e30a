// SentencePiece (Llama-2 family): wraps libsentencepiece.
#pragma once
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tf {

class SpmTokenizer final : public Tokenizer {
 public:
  // model_path: tokenizer.model; add_bos/add_eos as tokenizer_config.json says
  // (HF LlamaTokenizer defaults: true/false).
  SpmTokenizer(const std::string& model_path, bool add_bos, bool add_eos);
  ~SpmTokenizer() override;
  std::vector<int32_t> encode(const std::string& text, bool add_special = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const override;
  int64_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  std::string kind() const override { return "sentencepiece"; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  bool add_bos_, add_eos_;
};

}  // namespace tf
