// SwiGLU of one element, shared by the standalone silu_mul kernel
// (activation.cu) and the persistent step kernel (persistent_step.cu): one
// expression in one place, so both compile it to the same instructions.
#pragma once
#if defined(__CUDACC__)
namespace tf::cuda {

__device__ __forceinline__ float silu_mul_f32(float g, float u) { return (g / (1.0f + __expf(-g))) * u; }

}  // namespace tf::cuda
#endif
