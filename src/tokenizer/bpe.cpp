#include "tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <climits>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/gguf.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::vector<int16_t> to_byte;  // indexed by cp < 512
  ByteMap() : to_byte(512, -1) {
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = keep ? static_cast<uint32_t>(b) : extra++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// Length of the whitespace (Unicode White_Space) run ending at / starting at
// the given end of `s`, for added tokens' lstrip/rstrip.
size_t trailing_space_bytes(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    auto u = utf8_units(s.substr(start, end - start));
    if (u.size() != 1 || !is_space(u[0].cp)) break;
    end = start;
  }
  return s.size() - end;
}
size_t leading_space_bytes(std::string_view s) {
  size_t n = 0;
  for (const Utf8Unit& u : utf8_units(s.substr(0, std::min<size_t>(s.size(), 4096)))) {
    if (!is_space(u.cp)) break;
    n = u.off + u.len;
  }
  return n;
}

}  // namespace

uint32_t byte_to_cp(uint8_t b) { return byte_map().to_cp[b]; }
int cp_to_byte(uint32_t cp) { return cp < 512 ? byte_map().to_byte[cp] : -1; }

BpeTokenizer::BpeTokenizer(BpeSpec spec) : spec_(std::move(spec)) {
  for (const AddedToken& a : spec_.added) {
    TF_CHECK(a.id >= 0, "added token '" << a.content << "' has no id");
    if (static_cast<size_t>(a.id) >= spec_.tokens.size()) spec_.tokens.resize(a.id + 1);
    if (spec_.tokens[a.id].empty()) spec_.tokens[a.id] = a.content;
  }
  vocab_.reserve(spec_.tokens.size() * 2);
  for (size_t i = 0; i < spec_.tokens.size(); ++i)
    if (!spec_.tokens[i].empty()) vocab_.emplace(spec_.tokens[i], static_cast<int32_t>(i));
  pair_merge_.reserve(spec_.merges.size() * 2);
  for (size_t r = 0; r < spec_.merges.size(); ++r) {
    const std::string& m = spec_.merges[r];
    size_t sp = m.find(' ', 1);  // a token may itself be " " in non byte-level vocabs
    if (sp == std::string::npos) continue;
    auto a = vocab_.find(m.substr(0, sp)), b = vocab_.find(m.substr(sp + 1));
    auto ab = vocab_.find(m.substr(0, sp) + m.substr(sp + 1));
    if (a == vocab_.end() || b == vocab_.end() || ab == vocab_.end()) continue;
    pair_merge_.emplace(pair_key(a->second, b->second), std::make_pair(static_cast<int32_t>(r), ab->second));
  }
  is_special_.assign(spec_.tokens.size(), 0);
  added_by_byte_.assign(256, {});
  for (size_t k = 0; k < spec_.added.size(); ++k) {
    const AddedToken& a = spec_.added[k];
    is_special_[a.id] = a.special ? 1 : 2;
    if (a.content.empty()) continue;
    added_by_byte_[static_cast<uint8_t>(a.content[0])].push_back(static_cast<int32_t>(k));
  }
  for (auto& v : added_by_byte_)
    std::stable_sort(v.begin(), v.end(), [&](int32_t x, int32_t y) {
      return spec_.added[x].content.size() > spec_.added[y].content.size();
    });
}

int32_t BpeTokenizer::token_to_id(const std::string& tok) const {
  auto it = vocab_.find(tok);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeTokenizer::bpe_piece(const std::string& mapped, std::vector<int32_t>& out) const {
  if (spec_.ignore_merges) {
    auto it = vocab_.find(mapped);
    if (it != vocab_.end()) { out.push_back(it->second); return; }
  }
  // Symbols in a doubly linked list; a min-heap of candidate merges ordered by
  // (rank, position) -- the lowest-ranked pair, leftmost on ties, merges first.
  struct Sym { int32_t id; int32_t prev, next; };
  std::vector<Sym> sym;
  for (const Utf8Unit& u : utf8_units(mapped)) {
    auto it = vocab_.find(mapped.substr(u.off, u.len));
    int32_t k = static_cast<int32_t>(sym.size());
    sym.push_back({it == vocab_.end() ? -1 : it->second, k - 1, k + 1});
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  struct Cand { int32_t rank, pos, left, right, merged; };
  auto later = [](const Cand& a, const Cand& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::vector<Cand> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0) return;
    int32_t nx = sym[pos].next;
    if (nx < 0 || sym[pos].id < 0 || sym[nx].id < 0) return;
    auto it = pair_merge_.find(pair_key(sym[pos].id, sym[nx].id));
    if (it == pair_merge_.end()) return;
    heap.push_back({it->second.first, pos, sym[pos].id, sym[nx].id, it->second.second});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(sym.size()); ++k) push(k);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Cand c = heap.back();
    heap.pop_back();
    Sym& a = sym[c.pos];
    if (a.id != c.left || a.next < 0 || sym[a.next].id != c.right) continue;  // stale
    int32_t b = a.next;
    a.id = c.merged;
    a.next = sym[b].next;
    if (a.next >= 0) sym[a.next].prev = c.pos;
    sym[b].id = -2;  // dead
    push(a.prev);
    push(c.pos);
  }
  for (int32_t k = 0; k >= 0; k = sym[k].next) {
    if (sym[k].id >= 0) out.push_back(sym[k].id);
    else if (spec_.unk_id >= 0) out.push_back(spec_.unk_id);  // else dropped, as HF without unk
  }
}

void BpeTokenizer::encode_segment(const std::string& seg, std::vector<int32_t>& out) const {
  if (seg.empty()) return;
  std::string mapped;
  for (const std::string& piece : pre_tokenize(seg, spec_.pre)) {
    if (piece.empty()) continue;
    mapped.clear();
    for (unsigned char b : piece) append_utf8(mapped, byte_to_cp(b));
    bpe_piece(mapped, out);
  }
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text, bool add_special) const {
  std::vector<int32_t> out;
  if (add_special) out.insert(out.end(), spec_.prefix_ids.begin(), spec_.prefix_ids.end());
  std::string seg;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const AddedToken* hit = nullptr;
    for (int32_t k : added_by_byte_[static_cast<uint8_t>(text[i])]) {
      const AddedToken& a = spec_.added[k];
      if (text.compare(i, a.content.size(), a.content) == 0) { hit = &a; break; }
    }
    if (!hit) { seg += text[i++]; continue; }
    if (hit->lstrip) seg.resize(seg.size() - trailing_space_bytes(seg));
    encode_segment(seg, out);
    seg.clear();
    out.push_back(hit->id);
    i += hit->content.size();
    if (hit->rstrip) {
      size_t k;
      while ((k = leading_space_bytes(std::string_view(text).substr(i))) > 0) i += k;
    }
  }
  encode_segment(seg, out);
  if (add_special) out.insert(out.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    TF_CHECK(id >= 0 && static_cast<size_t>(id) < spec_.tokens.size(),
             "token id " << id << " out of range (vocab " << spec_.tokens.size() << ")");
    if (is_special_[id] == 1) {
      if (!skip_special) out += spec_.tokens[id];
      continue;
    }
    if (is_special_[id] == 2) {  // non-special added token: its text, verbatim
      out += spec_.tokens[id];
      continue;
    }
    const std::string& t = spec_.tokens[id];
    for (const Utf8Unit& u : utf8_units(t)) {
      int b = u.cp == kInvalidCp ? -1 : cp_to_byte(u.cp);
      if (b >= 0) out += static_cast<char>(b);
      else out.append(t, u.off, u.len);
    }
  }
  return out;
}

// ------------------------------------------------------------ tokenizer.json

namespace {

using nlohmann::json;

// Token ids index a vector of the vocabulary: beyond any real vocabulary (256K
// today), an id is a corrupt file, not a reason to allocate gigabytes.
constexpr int64_t kMaxTokenId = (int64_t(1) << 22) - 1;

// A token id from JSON: an integer in [0, kMaxTokenId] (a float or a huge
// number would not convert to int32_t).
int32_t token_id(const json& v, const std::string& origin, const std::string& what) {
  TF_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxTokenId,
           origin << ": " << what << " must be a token id in [0, " << kMaxTokenId << "], got " << v.dump());
  return static_cast<int32_t>(v.get<int64_t>());
}

void parse_pre(const json& p, const std::string& origin, std::vector<PreStep>& steps) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& q : p.at("pretokenizers")) parse_pre(q, origin, steps);
  } else if (type == "ByteLevel") {
    if (p.value("add_prefix_space", true)) steps.push_back({PreStep::kPrefixSpace});
    if (p.value("use_regex", true)) steps.push_back({PreStep::kSplit, SplitRegex::kGpt2});
  } else if (type == "Digits") {
    PreStep s{PreStep::kDigits};
    s.individual_digits = p.value("individual_digits", false);
    steps.push_back(s);
  } else if (type == "Split") {
    const json& pat = p.at("pattern");
    TF_CHECK(pat.contains("Regex"), origin << ": Split pre-tokenizer with a String pattern is not supported");
    SplitRegex re;
    TF_CHECK(split_regex_from_pattern(pat.at("Regex").get<std::string>(), &re),
             origin << ": unsupported Split regex " << pat.at("Regex").dump());
    TF_CHECK(p.value("behavior", "Isolated") == "Isolated" && !p.value("invert", false),
             origin << ": only Split behavior Isolated (invert false) is supported");
    steps.push_back({PreStep::kSplit, re});
  } else {
    TF_FAIL(origin << ": unsupported pre_tokenizer type '" << type << "'");
  }
}

int32_t lookup(const BpeSpec& s, const std::unordered_map<std::string, int32_t>& v,
               const std::string& tok) {
  for (const AddedToken& a : s.added)
    if (a.content == tok) return a.id;
  auto it = v.find(tok);
  return it == v.end() ? -1 : it->second;
}

void parse_post(const json& p, const std::string& origin, BpeSpec& s,
                const std::unordered_map<std::string, int32_t>& vocab) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& q : p.at("processors")) parse_post(q, origin, s, vocab);
  } else if (type == "ByteLevel") {
  } else if (type == "TemplateProcessing") {
    const json& specials = p.value("special_tokens", json::object());
    bool after = false;
    for (const json& item : p.at("single")) {
      if (item.contains("Sequence")) { after = true; continue; }
      TF_CHECK(item.contains("SpecialToken"), origin << ": bad TemplateProcessing item " << item.dump());
      const std::string name = item["SpecialToken"].at("id").get<std::string>();
      std::vector<int32_t> ids;
      if (specials.contains(name)) {
        for (const json& x : specials[name].at("ids")) ids.push_back(token_id(x, origin, "special token " + name));
      } else {
        int32_t id = lookup(s, vocab, name);
        TF_CHECK(id >= 0, origin << ": TemplateProcessing token '" << name << "' not in vocab");
        ids.push_back(id);
      }
      auto& dst = after ? s.suffix_ids : s.prefix_ids;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    s.prefix_ids.push_back(token_id(p.at("cls").at(1), origin, type + " cls"));
    s.suffix_ids.push_back(token_id(p.at("sep").at(1), origin, type + " sep"));
  } else {
    TF_FAIL(origin << ": unsupported post_processor type '" << type << "'");
  }
}

std::string config_token(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return "";
}

}  // namespace

std::unique_ptr<BpeTokenizer> load_bpe_from_json_text(const std::string& json_text,
                                                      const std::string& origin,
                                                      const std::string& config_json) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const std::exception& e) {
    TF_FAIL(origin << ": invalid JSON: " << e.what());
  }
  return load_bpe_from_json(j, origin, config_json);
}

bool is_sentencepiece_style(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return false;
  const json& m = j["model"];
  return m.value("type", "BPE") != "BPE" || (m.contains("byte_fallback") && m["byte_fallback"].is_boolean() &&
                                             m["byte_fallback"].get<bool>());
}

std::unique_ptr<BpeTokenizer> load_bpe_from_json(const nlohmann::json& j, const std::string& origin,
                                                 const std::string& config_json) {
  try {
    const json& m = j.at("model");
    TF_CHECK(m.value("type", "BPE") == "BPE",
             origin << ": tokenizer model type '" << m.value("type", "") << "' is not BPE");
    TF_CHECK(!m.value("byte_fallback", false), origin << ": BPE with byte_fallback is not supported");
    BpeSpec s;
    std::unordered_map<std::string, int32_t> vocab;
    for (auto it = m.at("vocab").begin(); it != m.at("vocab").end(); ++it) {
      const int32_t id = token_id(it.value(), origin, "vocab entry " + it.key());
      if (static_cast<size_t>(id) >= s.tokens.size()) s.tokens.resize(id + 1);
      s.tokens[id] = it.key();
      vocab.emplace(it.key(), id);
    }
    for (const json& mg : m.at("merges")) {
      if (mg.is_string()) s.merges.push_back(mg.get<std::string>());
      else s.merges.push_back(mg.at(0).get<std::string>() + " " + mg.at(1).get<std::string>());
    }
    s.ignore_merges = m.value("ignore_merges", false);
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      auto it = vocab.find(m["unk_token"].get<std::string>());
      if (it != vocab.end()) s.unk_id = it->second;
    }
    for (const json& a : j.value("added_tokens", json::array())) {
      AddedToken t;
      t.id = token_id(a.at("id"), origin, "added token id");
      t.content = a.at("content").get<std::string>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      s.added.push_back(t);
    }
    // NFC: the test texts and virtually all model input are already NFC;
    // other normalizers would change ids, so they are refused.
    const json norm = j.value("normalizer", json());
    TF_CHECK(norm.is_null() || norm.value("type", "") == "NFC",
             origin << ": unsupported normalizer " << norm.dump());
    parse_pre(j.value("pre_tokenizer", json()), origin, s.pre);
    parse_post(j.value("post_processor", json()), origin, s, vocab);
    json cfg;
    if (!config_json.empty()) cfg = json::parse(config_json, nullptr, false);
    std::string bos = config_token(cfg, "bos_token"), eos = config_token(cfg, "eos_token");
    if (!bos.empty()) s.bos_id = lookup(s, vocab, bos);
    else if (!s.prefix_ids.empty()) s.bos_id = s.prefix_ids.front();
    if (!eos.empty()) s.eos_id = lookup(s, vocab, eos);
    if (cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean() &&
        cfg["add_bos_token"].get<bool>() && s.prefix_ids.empty() && s.bos_id >= 0)
      s.prefix_ids.push_back(s.bos_id);
    return std::make_unique<BpeTokenizer>(std::move(s));
  } catch (const nlohmann::json::exception& e) {
    TF_FAIL(origin << ": malformed tokenizer.json: " << e.what());
  }
}

// ------------------------------------------------------------ GGUF

std::vector<PreStep> pre_steps_for_gguf(const std::string& name) {
  using K = PreStep;
  if (name == "gpt-2" || name == "gpt2" || name == "default" || name == "mpt" || name == "olmo" ||
      name == "jais")
    return {{K::kSplit, SplitRegex::kGpt2}};
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3" || name == "dbrx" ||
      name == "smaug-bpe")
    return {{K::kSplit, SplitRegex::kLlama3}};
  if (name == "qwen2" || name == "stablelm2") return {{K::kSplit, SplitRegex::kQwen2}};
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" ||
      name == "codeshell" || name == "exaone" || name == "minerva") {
    PreStep d{K::kDigits};
    d.individual_digits = true;
    return {d, {K::kSplit, SplitRegex::kGpt2}};
  }
  TF_FAIL("unsupported tokenizer.ggml.pre '" << name << "'");
}

std::unique_ptr<BpeTokenizer> load_bpe_from_gguf(const GgufFile& g) {
  const std::string model = g.get_string("tokenizer.ggml.model", "");
  TF_CHECK(model == "gpt2", g.path() << ": tokenizer.ggml.model '" << model
                                     << "' is not supported (only gpt2 byte-level BPE)");
  BpeSpec s;
  s.tokens = g.get_string_array("tokenizer.ggml.tokens");
  s.merges = g.get_string_array("tokenizer.ggml.merges");
  std::vector<int64_t> types = g.get_int_array("tokenizer.ggml.token_type");
  for (size_t i = 0; i < types.size() && i < s.tokens.size(); ++i) {
    if (types[i] != 3 && types[i] != 4) continue;  // 3 control, 4 user-defined
    AddedToken a;
    a.id = static_cast<int32_t>(i);
    a.content = s.tokens[i];
    a.special = types[i] == 3;
    s.added.push_back(a);
  }
  try {
    s.pre = pre_steps_for_gguf(g.get_string("tokenizer.ggml.pre", "default"));
  } catch (const Error& e) {
    TF_FAIL(g.path() << ": " << e.what());
  }
  s.bos_id = static_cast<int32_t>(g.get_int("tokenizer.ggml.bos_token_id", -1));
  s.eos_id = static_cast<int32_t>(g.get_int("tokenizer.ggml.eos_token_id", -1));
  s.unk_id = static_cast<int32_t>(g.get_int("tokenizer.ggml.unknown_token_id", -1));
  // tokenizer.ggml.add_space_prefix is a SentencePiece setting; llama.cpp's
  // BPE path ignores it, and so does this one.
  if (g.get_bool("tokenizer.ggml.add_bos_token", false) && s.bos_id >= 0) s.prefix_ids.push_back(s.bos_id);
  if (g.get_bool("tokenizer.ggml.add_eos_token", false) && s.eos_id >= 0) s.suffix_ids.push_back(s.eos_id);
  return std::make_unique<BpeTokenizer>(std::move(s));
}

}  // namespace tf
