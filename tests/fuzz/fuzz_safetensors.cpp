// safetensors: the 8-byte header length, the JSON header (dtypes, shapes,
// data_offsets, __metadata__), then the first and last row of every tensor as f32.
#include <vector>

#include "fuzz_input.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tf::fuzz::write_input(data, size, "model.safetensors");
  try {
    auto w = tf::open_safetensors(path);
    for (const auto& name : w->names()) {
      const tf::TensorInfo info = w->info(name);
      const int64_t rows = info.shape.empty() ? 1 : info.shape[0];
      int64_t row_len = 1;
      for (size_t d = 1; d < info.shape.size() && row_len <= (1 << 16); ++d) row_len *= info.shape[d];
      if (rows == 0 || row_len == 0 || row_len > (1 << 16)) continue;  // bounded reads keep executions fast
      std::vector<float> row(static_cast<size_t>(row_len));
      w->read_rows_f32(name, 0, 1, row.data());
      w->read_rows_f32(name, rows - 1, rows, row.data());
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
