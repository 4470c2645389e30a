// Byte-level BPE (GPT-2 byte<->unicode mapping, ranked merges) with HF-style
// added tokens, a configurable pre-tokenizer pipeline and BOS/EOS handling.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace tf {

class GgufFile;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true;
  bool lstrip = false;
  bool rstrip = false;
};

struct BpeSpec {
  std::vector<std::string> tokens;          // id -> token (byte-level alphabet)
  std::vector<std::string> merges;          // "a b", rank = index
  std::vector<AddedToken> added;            // split out before pre-tokenization
  std::vector<PreStep> pre;                 // pre-tokenizer pipeline
  std::vector<int32_t> prefix_ids, suffix_ids;  // added when add_special
  bool ignore_merges = false;               // whole piece in vocab -> one token
  int32_t unk_id = -1, bos_id = -1, eos_id = -1;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec);
  std::vector<int32_t> encode(const std::string& text, bool add_special = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(spec_.tokens.size()); }
  int32_t bos_id() const override { return spec_.bos_id; }
  int32_t eos_id() const override { return spec_.eos_id; }
  std::string kind() const override { return "bpe"; }

  const BpeSpec& spec() const { return spec_; }
  // Token id of a vocab or added-token string, -1 if absent.
  int32_t token_to_id(const std::string& tok) const;

 private:
  void encode_segment(const std::string& seg, std::vector<int32_t>& out) const;
  void bpe_piece(const std::string& mapped, std::vector<int32_t>& out) const;

  BpeSpec spec_;
  std::unordered_map<std::string, int32_t> vocab_;
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> pair_merge_;
  std::vector<int8_t> is_special_;                   // by id: 0 vocab, 1 special, 2 other added
  std::vector<std::vector<int32_t>> added_by_byte_;  // first byte -> added idx, longest first
};

// tokenizer.json text (HF tokenizers format). `origin` names it in errors;
// `config_json` is tokenizer_config.json's text or empty (bos/eos tokens).
std::unique_ptr<BpeTokenizer> load_bpe_from_json_text(const std::string& json_text,
                                                      const std::string& origin,
                                                      const std::string& config_json = "");
std::unique_ptr<BpeTokenizer> load_bpe_from_json(const nlohmann::json& j, const std::string& origin,
                                                 const std::string& config_json = "");
// True for HF tokenizer.json files of SentencePiece models (Llama-2's
// byte_fallback BPE, Unigram): load_tokenizer then uses tokenizer.model.
bool is_sentencepiece_style(const nlohmann::json& j);
// tokenizer.ggml.* metadata with tokenizer.ggml.model == "gpt2".
std::unique_ptr<BpeTokenizer> load_bpe_from_gguf(const GgufFile& gguf);
// The pipeline llama.cpp uses for tokenizer.ggml.pre `name`; throws if unknown.
std::vector<PreStep> pre_steps_for_gguf(const std::string& name);

// GPT-2's byte <-> code point mapping.
uint32_t byte_to_cp(uint8_t b);
int cp_to_byte(uint32_t cp);  // -1 if cp is not in the mapping

}  // namespace tf
