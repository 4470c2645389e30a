#include "model/draft_vocab.h"

#include <limits>
#include <sstream>

#include "core/device.h"
#include "ops/ops.h"

namespace tf {

std::string draft_vocab_error(const std::vector<int64_t>& ids, int64_t vocab) {
  std::ostringstream os;
  if (ids.empty()) return "holds no token ids (expected 1 to " + std::to_string(vocab) + ")";
  if (int64_t(ids.size()) > vocab) {
    os << "holds " << ids.size() << " ids, more than the vocabulary of " << vocab;
    return os.str();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      os << "entry " << i << " is token id " << ids[i] << ", outside the vocabulary [0, " << vocab << ")";
      return os.str();
    }
    if (i > 0 && ids[i] <= ids[i - 1]) {
      os << "entry " << i << " is token id " << ids[i] << " after " << ids[i - 1]
         << " (expected strictly increasing ids: sorted, no repeats)";
      return os.str();
    }
  }
  return "";
}

std::vector<int32_t> read_draft_vocab(const WeightSource& src, int64_t vocab) {
  const TensorInfo info = src.info(kDraftVocabTensor);
  const std::string where = info.file + ": tensor " + kDraftVocabTensor + " ";
  TF_CHECK(info.stored_type == "I32", where << "is " << info.stored_type << ", expected I32 token ids");
  TF_CHECK(info.shape.size() == 1, where << "has " << info.shape.size() << " dimensions, expected 1 ([K] token ids)");
  const std::vector<int64_t> ids = src.read_ints(kDraftVocabTensor);
  const std::string why = draft_vocab_error(ids, vocab);
  TF_CHECK(why.empty(), where << why);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

void restrict_head(LlamaWeights& w) {
  const Tensor& head = w.lm_head;
  TF_CHECK(head.data && head.dim(0) > w.head_ids.back(),
           "restrict_head: the lm_head has " << head.dim(0) << " rows, the reduced vocabulary needs id "
                                             << w.head_ids.back());
  Tensor ids = Tensor::cpu(DType::I32, {int64_t(w.head_ids.size())});
  std::copy(w.head_ids.begin(), w.head_ids.end(), ids.ptr<int32_t>());
  if (head.device != Device::CPU) {
    Tensor d = empty_tensor(head.device, DType::I32, ids.shape);
    copy_tensor(d, ids);
    ids = d;
  }
  Tensor rows = empty_tensor(head.device, head.dtype, {ids.dim(0), head.dim(1)});
  ops::embedding(head, ids, rows);  // out[i] = head[ids[i]]: the gather the forward's embedding already does
  w.lm_head = rows;
  w.head_rows = VocabSlice{0, ids.dim(0)};
}

Tensor expand_restricted_logits(const Tensor& logits_k, const std::vector<int32_t>& ids, int64_t vocab) {
  const int64_t n = logits_k.dim(0), k = logits_k.dim(1);
  TF_CHECK(k == int64_t(ids.size()), "expand_restricted_logits: " << k << " columns for " << ids.size() << " ids");
  Tensor out = Tensor::cpu(DType::F32, {n, vocab});
  float* o = out.ptr<float>();
  std::fill(o, o + n * vocab, -std::numeric_limits<float>::infinity());
  const float* in = logits_k.ptr<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) o[r * vocab + ids[size_t(j)]] = in[r * k + j];
  return out;
}

}  // namespace tf
