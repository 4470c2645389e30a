// When the middle level's retrieval cache is rebuilt from the committed context:
//   never      the reference's behaviour: chunks chosen once from the prompt
//   every:N    after every N generated tokens
//   below:A    when the top level's acceptance of the middle level's proposals,
//              over the last `window` top steps, drops below A (at most once
//              per window, so a hard passage does not rebuild every step)
// Rebuilding changes only the middle level's proposals; the top level's exact
// verification keeps the output distribution the target's either way.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

namespace tf::speculative {

struct ReretrievePolicy {
  enum class Kind { never, every, below };
  Kind kind = Kind::never;
  int64_t every = 0;
  double threshold = 0.0;
  int64_t window = 4;  // top steps in the rolling acceptance

  static ReretrievePolicy parse(const std::string& spec);  // one-line error naming --reretrieve
  std::string str() const;
};

class ReretrieveMonitor {
 public:
  explicit ReretrieveMonitor(ReretrievePolicy p) : p_(p) {}
  // After each top step: tokens generated so far and the top level's running
  // drafted/accepted totals. True when the retrieval cache should be rebuilt now.
  bool after_step(int64_t generated, int64_t top_drafted, int64_t top_accepted);
  int64_t rebuilds() const { return rebuilds_; }

 private:
  ReretrievePolicy p_;
  int64_t last_build_at_ = 0;        // tokens generated at the last (re)build
  int64_t steps_since_build_ = 0;
  int64_t prev_drafted_ = 0, prev_accepted_ = 0;
  std::deque<std::pair<int64_t, int64_t>> recent_;  // (drafted, accepted) of the last steps
  int64_t rebuilds_ = 0;
};

}  // namespace tf::speculative
