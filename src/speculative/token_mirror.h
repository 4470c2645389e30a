// The tokens a level's cache holds, compared with each new sequence at
// O(new tokens) per call. A chain's committed context only grows between
// begin()s and every sequence it sends extends the last committed one, so the
// cached tokens up to the committed watermark (set by commit()) are known to
// match and only the rest is compared: at a 122,880-token prompt a step then
// touches tens of tokens, not the prompt. A sequence shorter than the
// watermark, or one whose token just below it differs (a caller outside that
// contract), is compared from the start, which is today's full check.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace tf::speculative {

class TokenMirror {
 public:
  const std::vector<int32_t>& tokens() const { return tokens_; }
  size_t size() const { return tokens_.size(); }

  // Length of the longest common prefix of the held tokens and seq.
  size_t common(const std::vector<int32_t>& seq) const {
    const size_t lim = std::min(tokens_.size(), seq.size());
    size_t n = std::min(trusted_, lim);
    if (seq.size() < trusted_ || (n > 0 && seq[n - 1] != tokens_[n - 1])) n = 0;
    while (n < lim && tokens_[n] == seq[n]) ++n;
    return n;
  }
  void truncate(size_t n) {
    tokens_.resize(std::min(n, tokens_.size()));
    trusted_ = std::min(trusted_, tokens_.size());
  }
  template <class It>
  void append(It first, It last) {
    tokens_.insert(tokens_.end(), first, last);
  }
  void assign(const std::vector<int32_t>& t) {
    tokens_ = t;
    trusted_ = 0;
  }
  // The first n held tokens belong to a committed context: later sequences share them.
  void commit(size_t n) { trusted_ = std::min(n, tokens_.size()); }
  void clear() {
    tokens_.clear();
    trusted_ = 0;
  }

 private:
  std::vector<int32_t> tokens_;
  size_t trusted_ = 0;
};

}  // namespace tf::speculative
