// Token-id inputs of the CLI: a text file of one id per line (or an .npy
// array when the input starts with the .npy magic), and the --tokens list.
#include <cstring>

#include "cli/token_ids.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool npy = size >= 6 && std::memcmp(data, "\x93NUMPY", 6) == 0;
  const std::string path = tf::fuzz::write_input(data, size, npy ? "tokens.npy" : "tokens.txt");
  try {
    tf::cli::read_token_file(path);
  } catch (const tf::Error&) {
  }
  try {
    tf::cli::parse_token_list(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const tf::Error&) {
  }
  return 0;
}
