// The persistent whole-step kernel's host side (model/persistent_step.cpp; the
// kernel is kernels/persistent_step.cuh). LlamaModel::run_persistent and
// persistent_applies live there too.
#pragma once
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace tf {

// Why a model of these weights (uploaded to CUDA in dt) cannot take the
// persistent step; empty when it can: one rank, hidden <= 2048, head_dim 64 or
// 128, at most 4 query heads per KV head, stacked q/k/v and gate/up weights,
// weights up to 2 GB, the skinny GEMM's default variant.
std::string persistent_step_unsupported_for(const ModelConfig& cfg, const LlamaWeights& w, DType dt);

}  // namespace tf
