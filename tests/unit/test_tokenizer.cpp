// Tokenizer tests against ids produced by the reference libraries
// (scripts/make_tokenizer_fixtures.py; no python at test time).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
const std::string kDir = std::string(TF_FIXTURES) + "/tokenizer/";

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f) << p;
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

json load_json(const std::string& p) { return json::parse(slurp(p)); }

std::string show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

void expect_ids(const tf::Tokenizer& tok, const json& texts, const json& ids, bool roundtrip,
                const std::string& what) {
  ASSERT_EQ(texts.size(), ids.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string t = texts[i].get<std::string>();
    const auto want = ids[i].get<std::vector<int32_t>>();
    const auto got = tok.encode(t);
    EXPECT_EQ(got, want) << what << " text #" << i << " " << json(t).dump() << "\n got  "
                         << show(got) << "\n want " << show(want);
    if (roundtrip) {
      EXPECT_EQ(tok.decode(tok.encode(t, false), false), t) << what << " round trip #" << i;
    }
  }
}

TEST(Tokenizer, SmolLM2TokenizerJson) {
  auto tok = tf::load_tokenizer(kDir + "smollm2_tokenizer.json");
  EXPECT_EQ(tok->kind(), "bpe");
  EXPECT_EQ(tok->vocab_size(), 49152);
  json fx = load_json(kDir + "smollm2_ids.json");
  expect_ids(*tok, fx["texts"], fx["ids"], true, "smollm2 json");
}

TEST(Tokenizer, PreTokenizerVariants) {
  json base = load_json(kDir + "smollm2_tokenizer.json");
  json fx = load_json(kDir + "bpe_variants.json");
  for (auto it = fx["variants"].begin(); it != fx["variants"].end(); ++it) {
    json j = base;
    j["pre_tokenizer"] = it.value()["pre_tokenizer"];
    j["post_processor"] = it.value()["post_processor"];
    auto tok = tf::load_bpe_from_json_text(j.dump(), it.key());
    // add_prefix_space inserts a space, so that variant cannot round-trip.
    expect_ids(*tok, fx["texts"], it.value()["ids"], it.key() != "gpt2_prefix_space", it.key());
  }
}

TEST(Tokenizer, SmolLM2FromGguf) {
  const char* home = std::getenv("HOME");
  std::string path = std::string(home ? home : "") + "/.cache/triforce/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (scripts/fetch_default_model.sh)";
  auto tok = tf::load_tokenizer(path);
  EXPECT_EQ(tok->kind(), "bpe");
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  json fx = load_json(kDir + "smollm2_ids.json");
  expect_ids(*tok, fx["texts"], fx["ids"], true, "smollm2 gguf");
  EXPECT_EQ(tok->decode({1, 9906, 2}, true), tok->decode({9906}));
}

// Ids that transformers' own tokenizer (AutoTokenizer from the GGUF, on the GPU
// machine; tests/fixtures/smollm2/README.md) produced: the ground truth for the
// rebuilt tokenizer.json above and for the GGUF path.
TEST(Tokenizer, SmolLM2MatchesTransformersFromGguf) {
  json fx = load_json(std::string(TF_FIXTURES) + "/smollm2/tokenizer_ids.json");
  auto from_json = tf::load_tokenizer(kDir + "smollm2_tokenizer.json");
  expect_ids(*from_json, fx["texts"], fx["ids"], false, "transformers ids, tokenizer.json");
  const char* home = std::getenv("HOME");
  std::string path = std::string(home ? home : "") + "/.cache/triforce/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (scripts/fetch_default_model.sh)";
  auto from_gguf = tf::load_tokenizer(path);
  expect_ids(*from_gguf, fx["texts"], fx["ids"], false, "transformers ids, gguf");
}

TEST(Tokenizer, SentencePieceFolder) {
  auto tok = tf::load_tokenizer(kDir + "spm_tiny");
  EXPECT_EQ(tok->kind(), "sentencepiece");
  EXPECT_EQ(tok->vocab_size(), 500);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  json fx = load_json(kDir + "spm_tiny_ids.json");
  expect_ids(*tok, fx["texts"], fx["ids"], true, "spm");
  EXPECT_EQ(tok->encode("", true), std::vector<int32_t>{1});
  EXPECT_TRUE(tok->encode("", false).empty());
  EXPECT_EQ(tok->decode({1, 2}, false), "<s></s>");
  EXPECT_EQ(tok->decode({1, 2}, true), "");
}

TEST(Tokenizer, Llama2StyleFolderPrefersTokenizerModel) {
  // HF Llama-2 folders carry a byte_fallback BPE tokenizer.json next to
  // tokenizer.model; the latter is used.
  namespace fs = std::filesystem;
  fs::path dir = fs::path(TF_BINARY_DIR) / "tokenizer_llama2_style";
  fs::create_directories(dir);
  fs::copy_file(kDir + "spm_tiny/tokenizer.model", dir / "tokenizer.model",
                fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer.json")
      << R"({"model":{"type":"BPE","byte_fallback":true,"vocab":{},"merges":[]}})";
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_bos_token":false})";
  auto tok = tf::load_tokenizer(dir.string());
  EXPECT_EQ(tok->kind(), "sentencepiece");
  auto ref = tf::load_tokenizer(kDir + "spm_tiny");
  auto want = ref->encode("Hello world");
  want.erase(want.begin());  // add_bos_token false
  EXPECT_EQ(tok->encode("Hello world"), want);
  fs::remove(dir / "tokenizer.model");
  EXPECT_THROW(tf::load_tokenizer(dir.string()), tf::Error);
}

TEST(Tokenizer, ArbitraryBytesRoundTrip) {
  auto tok = tf::load_tokenizer(kDir + "smollm2_tokenizer.json");
  // Invalid UTF-8 goes through byte-level BPE unharmed (each stray byte is
  // its own symbol of the byte alphabet).
  const std::vector<std::string> cases = {"bad \xc3 utf8 \xe2\x82", "\xed\xa0\x80 surrogate",
                                          std::string("nul\0byte", 8), "\xf0\x9f\xa4 cut emoji",
                                          "\x80\x80\x80 \xbf"};
  for (const auto& s : cases) {
    auto ids = tok->encode(s);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok->decode(ids), s);
  }
  // SmolLM2's vocab has no token for bytes that never occur in UTF-8 text
  // (0xC0, 0xC1, 0xF5..0xFF, some C0 controls); like HF (unk_token null)
  // they are dropped, never a crash.
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_NO_THROW(tok->decode(tok->encode(all)));
  auto spm = tf::load_tokenizer(kDir + "spm_tiny");
  EXPECT_EQ(spm->decode(spm->encode("caf\xc3\xa9 \xe4\xb8\xad")), "caf\xc3\xa9 \xe4\xb8\xad");
}

TEST(Tokenizer, AddedTokens) {
  json j = load_json(kDir + "smollm2_tokenizer.json");
  int32_t next = 49152;
  j["added_tokens"].push_back({{"id", next}, {"content", "caf\u00e9!"}, {"special", false}});
  j["added_tokens"].push_back({{"id", next + 1}, {"content", "<sep>"}, {"special", true},
                               {"lstrip", true}, {"rstrip", true}});
  auto tok = tf::load_bpe_from_json(j, "added");
  EXPECT_EQ(tok->vocab_size(), next + 2);
  auto ids = tok->encode("a caf\u00e9! b  <sep>  c");
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), next), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), next + 1), 1);
  EXPECT_EQ(tok->decode(ids, false), "a caf\u00e9! b<sep>c");  // lstrip/rstrip ate the spaces
  EXPECT_EQ(tok->decode(ids, true), "a caf\u00e9! bc");
  EXPECT_EQ(tok->token_to_id("<sep>"), next + 1);
  EXPECT_EQ(tok->decode(tok->encode("x\u3000\n <sep>\u00a0\t y"), false), "x<sep>y");
}

TEST(Tokenizer, LongPiecesAreFast) {
  // One 50k-byte pre-token each: merging must not be quadratic.
  auto tok = tf::load_tokenizer(kDir + "smollm2_tokenizer.json");
  for (const std::string& s : {std::string(50000, ' '), std::string(50000, 'a'),
                              std::string(20000, '!') + "x", std::string(30000, '\n')}) {
    auto ids = tok->encode(s);
    EXPECT_LT(ids.size(), s.size());
    EXPECT_EQ(tok->decode(ids), s);
  }
}

TEST(Tokenizer, SplitRules) {
  auto split = [](const std::string& s, tf::SplitRegex re) {
    std::vector<std::string> out;
    for (auto v : tf::regex_split(s, re)) out.emplace_back(v);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello  world 1234567!!", tf::SplitRegex::kGpt2),
            (V{"Hello", " ", " world", " 1234567", "!!"}));
  EXPECT_EQ(split("I'M 1234567", tf::SplitRegex::kLlama3), (V{"I", "'M", " ", "123", "456", "7"}));
  EXPECT_EQ(split("I'M 123", tf::SplitRegex::kGpt2), (V{"I", "'", "M", " 123"}));
  EXPECT_EQ(split("a\n\n b", tf::SplitRegex::kLlama3), (V{"a", "\n\n", " b"}));
  EXPECT_EQ(split("12", tf::SplitRegex::kQwen2), (V{"1", "2"}));
  EXPECT_TRUE(split("", tf::SplitRegex::kGpt2).empty());
}

TEST(Tokenizer, Errors) {
  EXPECT_THROW(tf::load_tokenizer(kDir + "does_not_exist"), tf::Error);
  EXPECT_THROW(tf::load_bpe_from_json_text("{not json", "bad.json"), tf::Error);
  EXPECT_THROW(tf::load_bpe_from_json_text(R"({"model":{"type":"Unigram","vocab":[]}})", "u.json"),
               tf::Error);
  EXPECT_THROW(tf::pre_steps_for_gguf("no-such-pre"), tf::Error);
}

}  // namespace
