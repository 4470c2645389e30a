#include "speculative/simulate.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "core/check.h"

namespace tf::speculative {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string shortest(double v) {
  for (int p = 1; p <= 17; ++p) {
    std::ostringstream t;
    t.precision(p);
    t << v;
    if (std::strtod(t.str().c_str(), nullptr) == v) return t.str();
  }
  std::ostringstream t;
  t.precision(17);
  t << v;
  return t.str();
}

}  // namespace

std::vector<double> parse_acceptance_rates(const std::string& text, const std::string& option, char sep) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  const std::string usage =
      sep == '|' ? std::string("expected rates in [0, 1], alternatives separated by '|' (e.g. 0.8|0.9|0.98)")
                 : std::string("expected one rate in [0, 1] per verifying level, bottom first, separated by '") + sep +
                       "' (e.g. 0.35" + sep + "0.9137)";
  while (std::getline(ss, item, sep)) {
    item = trim(item);
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(item.c_str(), &end);
    TF_CHECK(!item.empty() && end && *end == '\0' && errno == 0,
             option << " " << text << ": '" << item << "' is not a number; " << usage);
    TF_CHECK(v >= 0.0 && v <= 1.0, option << " " << text << ": rate " << item << " outside [0, 1]; " << usage);
    out.push_back(v);
  }
  TF_CHECK(!out.empty() && (text.empty() || text.back() != sep), option << " '" << text << "': " << usage);
  return out;
}

std::string acceptance_str(const std::vector<double>& rates, char sep) {
  std::string s;
  for (size_t i = 0; i < rates.size(); ++i) {
    if (i) s.push_back(sep);
    s += shortest(rates[i]);
  }
  return s;
}

void check_simulated_acceptance(const std::vector<double>& rates, const std::string& method, const ResolvedMethod& rm) {
  if (rates.empty()) return;
  TF_CHECK(!rm.chain.levels.empty(), "--simulate-acceptance: method " << method
                                         << " verifies nothing (ar is the real baseline); simulate a speculative method");
  const size_t verifying = rm.chain.levels.size() - 1;
  TF_CHECK(rates.size() == verifying,
           "--simulate-acceptance " << acceptance_str(rates, ',') << ": the chain '" << rm.chain.str() << "' has "
                                    << verifying << " verifying level(s), so expected " << verifying
                                    << " rate(s), bottom first; got " << rates.size());
  for (double a : rates)
    TF_CHECK(a >= 0.0 && a <= 1.0, "--simulate-acceptance: rate " << a << " outside [0, 1]");
}

}  // namespace tf::speculative
