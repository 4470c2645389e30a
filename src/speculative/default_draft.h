// The draft of the named methods when --draft is not given (MethodRequest::draft
// empty): the trained draft committed for the default model when the target is
// that model, else the target's first quarter of layers (layerskip:max(1, L/4)).
//
// "That model" is decided from the weights, not a file name: the draft folder's
// config.json names the target's config fields and fingerprints its embedding
// (model/shared_embedding), so SmolLM2-135M-Instruct from the GGUF or from an HF
// folder gets the draft, and a synthetic model of the same shapes does not.
#pragma once
#include <string>

#include "model/llama.h"

namespace tf::speculative {

// The candidate folder: $TRIFORCE_DEFAULT_DRAFT when set ("none": no trained
// default), else experiments/draft/smollm2-135m-draft of the source tree this
// binary was built from.
std::string default_draft_folder();

struct DefaultDraft {
  std::string draft;   // "PATH" (a trained draft) or "layerskip:K"
  std::string choice;  // "trained" | "layerskip", for the summary and --json
  std::string why;     // one line: which draft and why
};

// A folder named by TRIFORCE_DEFAULT_DRAFT that is not a borrowing draft fails
// with one line; the compiled-in folder is skipped when absent.
DefaultDraft default_draft(const LlamaModel& target);

}  // namespace tf::speculative
