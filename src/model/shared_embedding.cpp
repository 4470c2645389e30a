#include "model/shared_embedding.h"

#include <cmath>
#include <sstream>

#include "core/device.h"
#include "model/draft_vocab.h"

namespace tf {

namespace {

// L2 norm of embedding row r, read from wherever the tensor lives.
double row_norm(const Tensor& embed, int64_t r) {
  Tensor row = embed;
  row.shape = {1, embed.dim(1)};
  row.data = static_cast<uint8_t*>(embed.data) + size_t(r * embed.dim(1)) * dtype_size(embed.dtype);
  row.owner.reset();
  const Tensor h = to_host_f32(row);
  double s = 0;
  for (int64_t i = 0; i < h.numel(); ++i) s += double(h.ptr<float>()[i]) * double(h.ptr<float>()[i]);
  return std::sqrt(s);
}

}  // namespace

std::string shared_embedding_mismatch(const ModelConfig& draft, const std::string& draft_path,
                                      const ModelConfig& target, const LlamaWeights& target_weights) {
  const SharedEmbedding& se = draft.shared_embedding;
  std::ostringstream os;
  os << "draft " << draft_path << ": ";
  if (!se.enabled) return os.str() + "its config.json has no triforce_shared_embedding marker";
  if (draft.vocab_size != target.vocab_size) {
    os << "borrows the target's embedding but has a vocabulary of " << draft.vocab_size << " tokens, the target "
       << target.vocab_size;
    return os.str();
  }
  if (draft.hidden_size != target.hidden_size) {
    os << "borrows the target's embedding but has hidden size " << draft.hidden_size << ", the target "
       << target.hidden_size;
    return os.str();
  }
  for (const auto& [key, want] : se.target) {
    double have = 0;
    target.hf_number(key, have);
    if (std::fabs(have - want) > 1e-9 * std::max(1.0, std::fabs(want))) {
      os << "was trained for a target with " << key << " = " << want << ", this target has " << have;
      return os.str();
    }
  }
  const Tensor& e = target_weights.embed;
  if (!e.data || e.shape != std::vector<int64_t>{target.vocab_size, target.hidden_size}) {
    os << "the target holds no whole embedding [" << target.vocab_size << ", " << target.hidden_size << "] to lend";
    return os.str();
  }
  for (size_t i = 0; i < se.fingerprint_rows.size(); ++i) {
    const int64_t r = se.fingerprint_rows[i];
    const double want = se.fingerprint_norms[i], have = row_norm(e, r);
    if (std::fabs(have - want) > kFingerprintTolerance * want) {
      os << "was trained on another model's embedding (row " << r << " has norm " << have << " in the target, "
         << want << " in the draft's fingerprint)";
      return os.str();
    }
  }
  return "";
}

void borrow_target_embedding(LlamaWeights& draft, const ModelConfig& draft_cfg, const std::string& draft_path,
                             const ModelConfig& target_cfg, const LlamaWeights& target_weights) {
  const std::string why = shared_embedding_mismatch(draft_cfg, draft_path, target_cfg, target_weights);
  TF_CHECK(why.empty(), why);
  const Tensor& e = target_weights.embed;
  TF_CHECK(draft.final_norm.device == e.device && draft.final_norm.dtype == e.dtype,
           "draft " << draft_path << ": its weights are " << dtype_name(draft.final_norm.dtype)
                    << (draft.final_norm.device == Device::CPU ? " on the CPU" : " on CUDA") << ", the target's embedding "
                    << dtype_name(e.dtype) << (e.device == Device::CPU ? " on the CPU" : " on CUDA")
                    << " (a borrowing draft runs where the target runs, in its dtype)");
  draft.embed = e;  // shares the target's storage (and keeps it alive)
  draft.lm_head = e;  // tied: the whole vocabulary, whatever slice the target's own head holds
  draft.head_rows = VocabSlice{0, target_cfg.vocab_size};
  if (!draft.head_ids.empty()) restrict_head(draft);  // its K rows, gathered where the embedding lives
}

}  // namespace tf
