// Error handling shared by every layer: a failed check throws tf::Error with
// file:line and a one-line message; the CLI turns it into exit code 1.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tf {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail_at(const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << msg << " [" << file << ":" << line << "]";
  throw Error(os.str());
}

}  // namespace tf

// TF_FAIL(a << b): throw with a streamed message.
#define TF_FAIL(msg_stream)                                   \
  do {                                                        \
    std::ostringstream tf_os_;                                \
    tf_os_ << msg_stream;                                     \
    ::tf::fail_at(__FILE__, __LINE__, tf_os_.str());          \
  } while (0)

// TF_CHECK(cond, a << b): throw when cond is false.
#define TF_CHECK(cond, msg_stream)                            \
  do {                                                        \
    if (!(cond)) TF_FAIL(msg_stream);                         \
  } while (0)
