#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace tf {
namespace {

struct Cursor {
  const std::vector<Utf8Unit>& u;
  size_t n;
  uint32_t cp(size_t i) const { return i < n ? u[i].cp : kInvalidCp; }
  bool L(size_t i) const { return i < n && is_letter(u[i].cp); }
  bool N(size_t i) const { return i < n && is_number(u[i].cp); }
  bool S(size_t i) const { return i < n && is_space(u[i].cp); }
  bool other(size_t i) const { return i < n && !L(i) && !N(i) && !S(i); }
  bool nl(size_t i) const { return i < n && (u[i].cp == '\r' || u[i].cp == '\n'); }
};

uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive. Returns length or 0.
size_t match_contraction(const Cursor& c, size_t i, bool ci) {
  if (c.cp(i) != '\'') return 0;
  auto ch = [&](size_t k) { return ci ? lower_ascii(c.cp(k)) : c.cp(k); };
  uint32_t a = ch(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  uint32_t b = ch(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+ at i (c.S(i) holds). Returns length.
size_t match_trailing_space(const Cursor& c, size_t i) {
  size_t j = i;
  while (c.S(j)) ++j;
  if (j == c.n) return j - i;      // run reaches the end: (?!\S) holds
  if (j - i >= 2) return j - i - 1;  // leave the last space for the next word
  return j - i;                    // \s+ fallback (single space before \S)
}

size_t match_gpt2(const Cursor& c, size_t i) {
  if (size_t k = match_contraction(c, i, false)) return k;
  size_t j = i + (c.cp(i) == ' ' ? 1 : 0);
  if (c.L(j)) { while (c.L(j)) ++j; return j - i; }
  if (c.N(j)) { while (c.N(j)) ++j; return j - i; }
  if (c.other(j)) { while (c.other(j)) ++j; return j - i; }
  if (c.S(i)) return match_trailing_space(c, i);
  return 1;
}

size_t match_llama(const Cursor& c, size_t i, size_t max_digits) {
  if (size_t k = match_contraction(c, i, true)) return k;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (i < c.n && !c.nl(i) && !c.L(i) && !c.N(i) && c.L(i + 1)) {
    size_t j = i + 1;
    while (c.L(j)) ++j;
    return j - i;
  }
  if (c.L(i)) { size_t j = i; while (c.L(j)) ++j; return j - i; }
  // \p{N}{1,max}
  if (c.N(i)) { size_t j = i; while (c.N(j) && j - i < max_digits) ++j; return j - i; }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  {
    size_t j = i + (c.cp(i) == ' ' ? 1 : 0);
    if (c.other(j)) {
      while (c.other(j)) ++j;
      while (c.nl(j)) ++j;
      return j - i;
    }
  }
  if (c.S(i)) {
    // \s*[\r\n]+ : ends right after the last \r or \n of the whitespace run.
    size_t j = i, last_nl = 0;
    bool any = false;
    while (c.S(j)) { if (c.nl(j)) { any = true; last_nl = j; } ++j; }
    if (any) return last_nl + 1 - i;
    return match_trailing_space(c, i);
  }
  return 1;
}

}  // namespace

std::vector<std::string_view> regex_split(std::string_view text, SplitRegex re) {
  std::vector<std::string_view> out;
  auto u = utf8_units(text);
  Cursor c{u, u.size()};
  size_t i = 0;
  while (i < c.n) {
    size_t k = re == SplitRegex::kGpt2     ? match_gpt2(c, i)
               : re == SplitRegex::kLlama3 ? match_llama(c, i, 3)
                                           : match_llama(c, i, 1);
    size_t b0 = u[i].off, b1 = i + k < c.n ? u[i + k].off : text.size();
    out.push_back(text.substr(b0, b1 - b0));
    i += k;
  }
  return out;
}

std::vector<std::string_view> digits_split(std::string_view text, bool individual) {
  std::vector<std::string_view> out;
  auto u = utf8_units(text);
  size_t i = 0, n = u.size();
  auto end_of = [&](size_t k) { return k < n ? u[k].off : text.size(); };
  while (i < n) {
    size_t j = i;
    bool num = is_number(u[i].cp);
    if (num && individual) j = i + 1;
    else while (j < n && is_number(u[j].cp) == num) ++j;
    out.push_back(text.substr(u[i].off, end_of(j) - u[i].off));
    i = j;
  }
  return out;
}

std::vector<std::string> pre_tokenize(std::string_view text, const std::vector<PreStep>& steps) {
  std::vector<std::string> pieces{std::string(text)};
  for (const PreStep& s : steps) {
    std::vector<std::string> next;
    next.reserve(pieces.size() * 2);
    for (const std::string& p : pieces) {
      if (s.kind == PreStep::kPrefixSpace) {
        next.push_back(p.empty() || p[0] == ' ' ? p : " " + p);
        continue;
      }
      auto parts = s.kind == PreStep::kSplit ? regex_split(p, s.regex)
                                             : digits_split(p, s.individual_digits);
      for (auto v : parts) next.emplace_back(v);
    }
    pieces.swap(next);
  }
  return pieces;
}

bool split_regex_from_pattern(const std::string& pattern, SplitRegex* out) {
  static const char* kGpt2 =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  static const char* kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (pattern == kGpt2) *out = SplitRegex::kGpt2;
  else if (pattern == kLlama3) *out = SplitRegex::kLlama3;
  else if (pattern == kQwen2) *out = SplitRegex::kQwen2;
  else return false;
  return true;
}

}  // namespace tf
