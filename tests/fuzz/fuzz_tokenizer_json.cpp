// tokenizer.json: model (vocab, merges, unk), added tokens, normalizer,
// pre_tokenizer and post_processor pipelines; then an encode/decode of a fixed
// text that touches every pre-tokenizer class, and a decode of the first ids.
#include <vector>

#include "fuzz_input.h"
#include "tokenizer/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto tok = tf::load_bpe_from_json_text(std::string(reinterpret_cast<const char*>(data), size), "tokenizer.json");
    const auto ids = tok->encode("Hello, world!  It's 2024 \xe2\x80\x94 caf\xc3\xa9\r\n\t<|endoftext|> x\xff", true);
    tok->decode(ids, false);
    tok->decode(ids, true);
    std::vector<int32_t> first;
    for (int32_t i = 0; i < tok->vocab_size() && i < 300; ++i) first.push_back(i);
    tok->decode(first, false);
  } catch (const tf::Error&) {
  }
  return 0;
}
