// Byte-level BPE pre-tokenizers, hand-written over code points so that each
// model's split regex is reproduced exactly (std::regex has no \p{L}).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tf {

enum class SplitRegex {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|..)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,   // as kLlama3 with \p{N} (single digits)
};

// One pre-tokenizer stage, applied to every piece produced by the stage before.
struct PreStep {
  enum Kind { kSplit, kDigits, kPrefixSpace } kind = kSplit;
  SplitRegex regex = SplitRegex::kGpt2;  // kSplit
  bool individual_digits = true;         // kDigits
};

// Splits `text` the way regex findall with `re` does (every byte ends up in
// exactly one piece; invalid UTF-8 bytes behave as symbols).
std::vector<std::string_view> regex_split(std::string_view text, SplitRegex re);
// HF Digits pre-tokenizer: isolates each \p{N} (individual) or runs of \p{N}.
std::vector<std::string_view> digits_split(std::string_view text, bool individual);

// Runs the pipeline on one segment of text (added tokens already removed).
std::vector<std::string> pre_tokenize(std::string_view text, const std::vector<PreStep>& steps);

// The known regex strings (as in tokenizer.json) -> SplitRegex; false if unknown.
bool split_regex_from_pattern(const std::string& pattern, SplitRegex* out);

}  // namespace tf
