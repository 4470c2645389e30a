// GGUF: header, metadata, tensor directory; then, where they load, the model
// config (llama.* keys), the tensors under HF names (first and last row of each,
// dequantized, q/k un-permuted) and the gpt2 tokenizer (an encode/decode).
#include <memory>
#include <vector>

#include "fuzz_input.h"
#include "io/gguf.h"
#include "io/weight_source.h"
#include "model/config.h"
#include "tokenizer/bpe.h"

namespace {

void read_tensors(const std::shared_ptr<const tf::GgufFile>& f) {
  const tf::ModelConfig cfg = tf::config_from_gguf(*f);
  auto w = tf::make_gguf_weights(f, cfg);
  for (const auto& name : w->names()) {
    const tf::TensorInfo info = w->info(name);
    const int64_t rows = info.shape[0];
    int64_t row_len = 1;
    for (size_t d = 1; d < info.shape.size() && row_len <= (1 << 16); ++d) row_len *= info.shape[d];
    if (row_len > (1 << 16)) continue;  // bounded reads keep executions fast
    std::vector<float> row(static_cast<size_t>(row_len));
    try {
      w->read_rows_f32(name, 0, 1, row.data());
      w->read_rows_f32(name, rows - 1, rows, row.data());
    } catch (const tf::Error&) {  // an unsupported quantization: go on with the next tensor
    }
  }
}

void use_tokenizer(const tf::GgufFile& f) {
  auto tok = tf::load_bpe_from_gguf(f);
  const auto ids = tok->encode("Hello, world! 123  caf\xc3\xa9\n\t<|im_start|>x", true);
  tok->decode(ids, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tf::fuzz::write_input(data, size, "model.gguf");
  try {
    auto f = std::make_shared<const tf::GgufFile>(path);
    try {
      read_tensors(f);
    } catch (const tf::Error&) {
    }
    use_tokenizer(*f);
  } catch (const tf::Error&) {
  }
  return 0;
}
