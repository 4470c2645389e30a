#include "speculative/default_draft.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/check.h"
#include "io/hf_config.h"
#include "model/shared_embedding.h"

#ifndef TRIFORCE_SOURCE_DIR
#define TRIFORCE_SOURCE_DIR ""
#endif

namespace tf::speculative {

std::string default_draft_folder() {
  if (const char* e = std::getenv("TRIFORCE_DEFAULT_DRAFT")) return e;
  const std::string src = TRIFORCE_SOURCE_DIR;
  return src.empty() ? "" : src + "/experiments/draft/smollm2-135m-draft";
}

DefaultDraft default_draft(const LlamaModel& target) {
  DefaultDraft d;
  d.choice = "layerskip";
  d.draft = "layerskip:" + std::to_string(std::max<int64_t>(1, target.config().num_layers / 4));
  const bool from_env = std::getenv("TRIFORCE_DEFAULT_DRAFT") != nullptr;
  const std::string folder = default_draft_folder();
  if (folder.empty() || folder == "none") {
    d.why = d.draft + " (no trained default draft: TRIFORCE_DEFAULT_DRAFT=none)";
    return d;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path cfg_path = fs::path(folder) / "config.json";
  if (!fs::exists(cfg_path, ec)) {
    TF_CHECK(!from_env, "TRIFORCE_DEFAULT_DRAFT=" << folder << ": no config.json there (expected a draft folder, or none)");
    d.why = d.draft + " (the trained default draft " + folder + " is not there)";
    return d;
  }
  const ModelConfig dc = config_from_hf_json(cfg_path.string());
  TF_CHECK(dc.shared_embedding.enabled, (from_env ? "TRIFORCE_DEFAULT_DRAFT=" : "default draft ")
                                            << folder << ": its config.json has no triforce_shared_embedding marker");
  const std::string mismatch = shared_embedding_mismatch(dc, folder, target.config(), target.weights());
  if (!mismatch.empty()) {
    d.why = d.draft + " (the trained default draft is for another model: " + mismatch + ")";
    return d;
  }
  d.choice = "trained";
  d.draft = folder;
  d.why = folder + " (the trained draft for this target)";
  return d;
}

}  // namespace tf::speculative
