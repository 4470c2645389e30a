// Writes one array as an HDF5 dataset, atomically (tmp file + rename), so a
// killed process never leaves a half-written result file.
#pragma once
#include <map>
#include <string>

#include "core/tensor.h"

namespace tf {

void write_h5_array(const std::string& path, const std::string& dataset, const Tensor& t,
                    const std::map<std::string, std::string>& string_attrs = {});
Tensor read_h5_array(const std::string& path, const std::string& dataset);

}  // namespace tf
