#include "tokenizer/spm.h"

#include <sentencepiece_processor.h>

#include "core/check.h"

namespace tf {

SpmTokenizer::SpmTokenizer(const std::string& model_path, bool add_bos, bool add_eos)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()), add_bos_(add_bos), add_eos_(add_eos) {
  auto st = sp_->Load(model_path);
  TF_CHECK(st.ok(), model_path << ": cannot load SentencePiece model: " << st.ToString());
}

SpmTokenizer::~SpmTokenizer() = default;

std::vector<int32_t> SpmTokenizer::encode(const std::string& text, bool add_special) const {
  std::vector<int> ids;
  auto st = sp_->Encode(text, &ids);
  TF_CHECK(st.ok(), "SentencePiece encode failed: " << st.ToString());
  std::vector<int32_t> out;
  out.reserve(ids.size() + 2);
  if (add_special && add_bos_ && sp_->bos_id() >= 0) out.push_back(sp_->bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
  if (add_special && add_eos_ && sp_->eos_id() >= 0) out.push_back(sp_->eos_id());
  return out;
}

std::string SpmTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const int n = sp_->GetPieceSize();
  std::string out, part;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    auto st = sp_->Decode(run, &part);
    TF_CHECK(st.ok(), "SentencePiece decode failed: " << st.ToString());
    out += part;
    run.clear();
  };
  for (int32_t id : ids) {
    TF_CHECK(id >= 0 && id < n, "token id " << id << " out of range (vocab " << n << ")");
    if (sp_->IsControl(id)) {
      if (!skip_special) { flush(); out += sp_->IdToPiece(id); }
      continue;
    }
    run.push_back(id);
  }
  flush();
  return out;
}

int64_t SpmTokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int32_t SpmTokenizer::bos_id() const { return sp_->bos_id(); }
int32_t SpmTokenizer::eos_id() const { return sp_->eos_id(); }

}  // namespace tf
