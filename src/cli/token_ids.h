// Token ids given to the CLI: a comma-separated --tokens list, or a file
// (one id per line, or an .npy int array). Apart from options.h so that the
// fuzz targets can build it without the rest of the CLI.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tf::cli {

// "1,2,3" -> ids; every id a non-negative int32.
std::vector<int32_t> parse_token_list(const std::string& csv);
// A file with one id per line (blank lines skipped), or an .npy int array.
std::vector<int32_t> read_token_file(const std::string& path);

}  // namespace tf::cli
