#pragma once
#include <string>
#include <vector>

namespace tf::cli {
int cmd_info(const std::vector<std::string>& args);
int cmd_logits(const std::vector<std::string>& args);
int cmd_generate(const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args);
int cmd_merge(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
}  // namespace tf::cli
