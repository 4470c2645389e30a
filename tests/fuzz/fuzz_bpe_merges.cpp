// Byte-level BPE merges with a round-trip oracle. Input: a pre-tokenizer
// selector byte, then the text up to the first NUL, then one merge per line
// ("LEFT RIGHT" in raw bytes). The vocabulary is the 256 byte symbols plus each
// merge's result, so every text must decode back to itself exactly, whatever
// the merges: a difference is a finding (abort), like a crash.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "tokenizer/bpe.h"

namespace {

std::string byte_level(const std::string& raw) {
  std::string s;
  for (unsigned char b : raw) {
    const uint32_t cp = tf::byte_to_cp(b);  // < 0x800: one or two UTF-8 bytes
    if (cp < 0x80) s.push_back(char(cp));
    else s += {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  }
  return s;
}

std::vector<tf::PreStep> pre_steps(uint8_t selector) {
  using K = tf::PreStep;
  switch (selector % 5) {
    case 0: return {};
    case 1: return {{K::kSplit, tf::SplitRegex::kGpt2}};
    case 2: return {{K::kSplit, tf::SplitRegex::kLlama3}};
    case 3: return {{K::kSplit, tf::SplitRegex::kQwen2}};
    default: {
      K d{K::kDigits};
      d.individual_digits = selector & 8;
      return {d, {K::kSplit, tf::SplitRegex::kGpt2}};
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = in.find('\0');
  const std::string text = in.substr(0, nul);
  tf::BpeSpec spec;
  spec.pre = pre_steps(data[0]);
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(byte_level(std::string(1, char(b))));
  std::vector<std::string> seen(spec.tokens);
  if (nul != std::string::npos) {
    size_t pos = nul + 1;
    while (pos < in.size() && spec.merges.size() < 4096) {
      size_t eol = in.find('\n', pos);
      if (eol == std::string::npos) eol = in.size();
      const std::string line = in.substr(pos, eol - pos);
      pos = eol + 1;
      const size_t sp = line.find(' ', 1);
      if (sp == std::string::npos) continue;
      const std::string left = byte_level(line.substr(0, sp)), right = byte_level(line.substr(sp + 1));
      spec.merges.push_back(left + " " + right);
      spec.tokens.push_back(left + right);  // duplicates are harmless: the first id wins
    }
  }
  try {
    tf::BpeTokenizer tok(std::move(spec));
    const std::string back = tok.decode(tok.encode(text, false), false);
    if (back != text) {
      std::fprintf(stderr, "bpe round trip failed: %zu bytes in, %zu bytes out\n", text.size(), back.size());
      std::abort();
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
