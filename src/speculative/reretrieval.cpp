#include "speculative/reretrieval.h"

#include <cstdlib>
#include <sstream>

#include "core/check.h"

namespace tf::speculative {

ReretrievePolicy ReretrievePolicy::parse(const std::string& spec) {
  ReretrievePolicy p;
  if (spec == "never") return p;
  auto number = [&](const std::string& s) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    TF_CHECK(!s.empty() && end && *end == '\0', "--reretrieve " << spec << ": expected never, every:N or below:A");
    return v;
  };
  if (spec.rfind("every:", 0) == 0) {
    const double n = number(spec.substr(6));
    TF_CHECK(n >= 1 && double(int64_t(n)) == n, "--reretrieve " << spec << ": N must be a whole number >= 1");
    p.kind = Kind::every;
    p.every = int64_t(n);
    return p;
  }
  if (spec.rfind("below:", 0) == 0) {
    const double a = number(spec.substr(6));
    TF_CHECK(a > 0 && a <= 1, "--reretrieve " << spec << ": A must be an acceptance rate in (0, 1]");
    p.kind = Kind::below;
    p.threshold = a;
    return p;
  }
  TF_FAIL("--reretrieve " << spec << ": expected never, every:N or below:A");
}

std::string ReretrievePolicy::str() const {
  std::ostringstream os;
  if (kind == Kind::never) os << "never";
  if (kind == Kind::every) os << "every:" << every;
  if (kind == Kind::below) os << "below:" << threshold;
  return os.str();
}

bool ReretrieveMonitor::after_step(int64_t generated, int64_t top_drafted, int64_t top_accepted) {
  recent_.emplace_back(top_drafted - prev_drafted_, top_accepted - prev_accepted_);
  prev_drafted_ = top_drafted;
  prev_accepted_ = top_accepted;
  while (int64_t(recent_.size()) > p_.window) recent_.pop_front();
  ++steps_since_build_;
  bool rebuild = false;
  if (p_.kind == ReretrievePolicy::Kind::every) {
    rebuild = generated - last_build_at_ >= p_.every;
  } else if (p_.kind == ReretrievePolicy::Kind::below && steps_since_build_ >= p_.window) {
    int64_t d = 0, a = 0;
    for (auto [dd, aa] : recent_) d += dd, a += aa;
    rebuild = d > 0 && double(a) / double(d) < p_.threshold;
  }
  if (rebuild) {
    last_build_at_ = generated;
    steps_since_build_ = 0;
    recent_.clear();
    ++rebuilds_;
  }
  return rebuild;
}

}  // namespace tf::speculative
